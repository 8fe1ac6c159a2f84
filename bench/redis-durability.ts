// What durability costs a Redis store whose every operation is one EVALSHA of a small Lua script (an idempotency claim:
// HMGET, HSET of 8 fields, PEXPIREAT, on one key), at 1 and at 32 concurrent callers, for:
//   1. a primary alone, `appendonly no`;
//   2. `appendonly yes`, `appendfsync everysec`;
//   3. `appendonly yes`, `appendfsync always`;
//   4. a primary with one replica, each call followed by `WAIT 1 <timeout>` in the same pipeline; also with ioredis's
//      auto-pipelining, and with a connection per caller.
// It starts its own throwaway redis-server processes (free ports, temporary folders; never the one on 6379) and
// stops them all at the end, also on an error or a signal. Prints a markdown table.
//
//   node --import ./scripts/register-ts.mjs bench/redis-durability.ts
//
// BENCH_SECONDS (default 3): each row's measured time, in BENCH_ROUNDS (default 3) slices: every server runs at once and
//   the rows are measured in turn, round after round, so that a noisy moment of the machine falls on all of them. Each
//   slice starts with a warm-up of a sixth of it (at most 0.5 s), not counted.
// BENCH_WAIT_TIMEOUT_MS (default 1000): the timeout of each WAIT.
// REDIS_SERVER (default `redis-server` on the PATH): the server binary.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const WAIT_TIMEOUT_MS = Number(process.env.BENCH_WAIT_TIMEOUT_MS ?? 1000);
const REDIS_SERVER = process.env.REDIS_SERVER ?? 'redis-server';
const LEASE_MS = 60_000;
const TTL_MS = 86_400_000;

// A stand-in for a claim: read the record, answer from it if it holds the key, else write the claim (8 fields) and
// its expiry. The server's clock (TIME), never the caller's. Every call of the bench claims a new key, so every call
// writes.
const CLAIM = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'status', 'fingerprint', 'locked_until', 'expires_at', 'response_status',
  'attempts')
if r[1] and tonumber(r[4]) > now then
  if r[1] == 'completed' then return {'completed', r[2], r[5]} end
  if r[2] ~= ARGV[1] or tonumber(r[3]) > now then return {'in_progress', r[2]} end
end
local attempts = 1
if r[1] == 'in_progress' then attempts = tonumber(r[6]) + 1 end
local locked_until = now + tonumber(ARGV[3])
local expires_at = locked_until + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'in_progress', 'fingerprint', ARGV[1], 'attempt', ARGV[2],
  'attempts', attempts, 'created_at', now, 'locked_until', locked_until, 'expires_at', expires_at, 'awaited', 0)
redis.call('PEXPIREAT', KEYS[1], expires_at)
return {'claimed', attempts}
`;

// ---------------------------------------------------------------------------------------------------------------
// Throwaway servers

interface Server {
  name: string;
  port: number;
  dir: string;
  child: ChildProcess;
  exited: boolean;
}

const servers: Server[] = [];
const startedPids: number[] = [];

async function freePort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const address = probe.address();
  probe.close();
  await once(probe, 'close');
  if (address === null || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

async function startServer(name: string, settings: string[]): Promise<Server> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), `bench-redis-${name}-`));
  const log = join(dir, 'redis.log');
  const config = [
    `port ${port}`,
    'bind 127.0.0.1',
    `dir ${dir}`,
    `logfile ${log}`,
    'daemonize no',
    'save ""', // no RDB snapshots: each configuration's persistence is its AOF alone
    ...settings,
  ];
  writeFileSync(join(dir, 'redis.conf'), `${config.join('\n')}\n`);
  const child = spawn(REDIS_SERVER, [join(dir, 'redis.conf')], { stdio: 'ignore' });
  const server: Server = { name, port, dir, child, exited: false };
  servers.push(server);
  if (child.pid !== undefined) startedPids.push(child.pid);
  child.on('exit', () => (server.exited = true));
  child.on('error', () => (server.exited = true));
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (server.exited) throw new Error(`redis-server ${name} exited at start:\n${tail(log)}`);
    const probe = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') return server;
    } catch {
      // not up yet (or still loading)
    } finally {
      probe.disconnect();
    }
    if (Date.now() > deadline) throw new Error(`redis-server ${name} did not answer within 10 s:\n${tail(log)}`);
    await sleep(50);
  }
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-10).join('\n');
  } catch {
    return '(no log)';
  }
}

async function stopServer(server: Server): Promise<void> {
  if (!server.exited) {
    const exited = once(server.child, 'exit');
    server.child.kill('SIGTERM');
    const stopped = await Promise.race([exited.then(() => true), sleep(5_000).then(() => false)]);
    if (!stopped) {
      server.child.kill('SIGKILL');
      await exited;
    }
  }
  rmSync(server.dir, { recursive: true, force: true });
  servers.splice(servers.indexOf(server), 1);
}

async function stopAll(): Promise<void> {
  for (const server of [...servers]) await stopServer(server);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Last resort, synchronous: whatever is still running when the process exits is killed, its folder removed.
process.on('exit', () => {
  for (const server of servers) {
    if (!server.exited) server.child.kill('SIGKILL');
    rmSync(server.dir, { recursive: true, force: true });
  }
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.error(`${signal}: stopping the servers`);
    void stopAll().finally(() => process.exit(130));
  });
}

async function waitForReplica(primary: Server, replica: Server): Promise<void> {
  const p = new Redis({ port: primary.port, host: '127.0.0.1' });
  const r = new Redis({ port: replica.port, host: '127.0.0.1' });
  try {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const [primaryInfo, replicaInfo] = await Promise.all([p.info('replication'), r.info('replication')]);
      if (/connected_slaves:1/.test(primaryInfo) && /master_link_status:up/.test(replicaInfo)) return;
      if (Date.now() > deadline)
        throw new Error(`the replica did not sync within 15 s:\n${tail(join(replica.dir, 'redis.log'))}`);
      await sleep(100);
    }
  } finally {
    p.disconnect();
    r.disconnect();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Clients and calls

const RUN = randomUUID().slice(0, 8);
/** Every client the bench opened, closed at the end. */
const connections: Redis[] = [];
const FINGERPRINT = 'f'.repeat(64);
let sequence = 0;

function claimArgs(): [string, string, string, number, number] {
  sequence += 1;
  return [`idempotency:{acct_bench:POST /v1/charges:${RUN}-${sequence}}`, FINGERPRINT, randomUUID(), LEASE_MS, TTL_MS];
}

async function client(port: number, autoPipelining: boolean): Promise<{ redis: Redis; sha: string }> {
  const redis = new Redis({ port, host: '127.0.0.1', enableAutoPipelining: autoPipelining, lazyConnect: true });
  connections.push(redis);
  await redis.connect();
  const sha = (await redis.script('LOAD', CLAIM)) as string;
  return { redis, sha };
}

/** One call: resolves to 1 when its WAIT was answered with no replica (timed out), else 0. */
type Call = () => Promise<number>;

function evalOnly(redis: Redis, sha: string): Call {
  return async () => {
    await redis.evalsha(sha, 1, ...claimArgs());
    return 0;
  };
}

/** EVALSHA then WAIT, one pipeline (one write), the answers read together. */
function evalThenWait(redis: Redis, sha: string): Call {
  return async () => {
    const answers = await redis
      .pipeline()
      .evalsha(sha, 1, ...claimArgs())
      .wait(1, WAIT_TIMEOUT_MS)
      .exec();
    if (answers === null) throw new Error('pipeline discarded');
    for (const [error] of answers) if (error) throw error;
    return answers[1][1] === 0 ? 1 : 0;
  };
}

/** EVALSHA then WAIT as two commands issued in the same tick: auto-pipelining sends them (and the other callers') together. */
function evalThenWaitAuto(redis: Redis, sha: string): Call {
  return async () => {
    const [, replicas] = await Promise.all([redis.evalsha(sha, 1, ...claimArgs()), redis.wait(1, WAIT_TIMEOUT_MS)]);
    return replicas === 0 ? 1 : 0;
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Measuring

/** One row of the table: a configuration at a number of callers, measured in slices (one per round). */
interface Measurement {
  configuration: string;
  /** The configuration 1 measurement this one is compared with (same callers). */
  baseline: string;
  /** `calls[i]` is caller i's call (several callers may share one connection). */
  calls: Call[];
  latencies: number[];
  waitTimeouts: number;
  seconds: number;
}

const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
const SLICE_SECONDS = SECONDS / ROUNDS;
const WARMUP_SECONDS = Math.min(0.5, SLICE_SECONDS / 6);
const measurements: Measurement[] = [];
let fsyncMs = NaN;

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** One slice of a measurement: its callers call in a loop; what starts after the warm-up is counted. */
async function slice(measurement: Measurement): Promise<void> {
  const warmupEnd = performance.now() + WARMUP_SECONDS * 1000;
  const end = warmupEnd + SLICE_SECONDS * 1000;
  const caller = async (call: Call): Promise<void> => {
    for (;;) {
      const start = performance.now();
      if (start >= end) return;
      const timedOut = await call();
      if (start >= warmupEnd) {
        measurement.latencies.push(performance.now() - start);
        measurement.waitTimeouts += timedOut;
      }
    }
  };
  await Promise.all(measurement.calls.map(caller));
  measurement.seconds += SLICE_SECONDS;
}

const BASE = '1. primary alone, appendonly no';
const BASE_AUTO = '1. primary alone, appendonly no, auto-pipelined';

/** Rows at 1 and at 32 callers, all sharing one connection (as an application's one ioredis client is shared). */
async function sharedConnection(
  port: number,
  configuration: string,
  baseline: string,
  autoPipelining: boolean,
  makeCall: (redis: Redis, sha: string) => Call,
): Promise<void> {
  const { redis, sha } = await client(port, autoPipelining);
  for (const callers of [1, 32]) {
    const calls = Array.from({ length: callers }, () => makeCall(redis, sha));
    measurements.push({ configuration, baseline, calls, latencies: [], waitTimeouts: 0, seconds: 0 });
  }
}

async function main(): Promise<void> {
  const version = execFileSync(REDIS_SERVER, ['--version'], { encoding: 'utf8' }).trim();
  console.error(`${version}; node ${process.version}; ${cpus().length} CPUs, load ${loadavg()[0].toFixed(2)}`);
  console.error(
    `${SECONDS} s per row, in ${ROUNDS} interleaved slices of ${SLICE_SECONDS.toFixed(2)} s ` +
      `(+${WARMUP_SECONDS.toFixed(2)} s warm-up each), WAIT timeout ${WAIT_TIMEOUT_MS} ms`,
  );
  fsyncMs = fsyncMedianMs();
  console.error(`a 512-byte write + fsync in ${tmpdir()}: ${ms(fsyncMs)} ms (median of 200)`);

  // Every server up at once, so that the rows can be measured in turn, round after round: the machine's noise then
  // falls on all of them alike rather than on whichever ran while it was loudest.
  const plain = await startServer('plain', ['appendonly no']);
  const everysec = await startServer('everysec', ['appendonly yes', 'appendfsync everysec']);
  const always = await startServer('always', ['appendonly yes', 'appendfsync always']);
  const primary = await startServer('primary', ['appendonly no']);
  const replica = await startServer('replica', ['appendonly no', `replicaof 127.0.0.1 ${primary.port}`]);
  await waitForReplica(primary, replica);

  await sharedConnection(plain.port, BASE, BASE, false, evalOnly);
  await sharedConnection(plain.port, BASE_AUTO, BASE_AUTO, true, evalOnly);
  await sharedConnection(everysec.port, '2. appendonly yes, appendfsync everysec', BASE, false, evalOnly);
  await sharedConnection(always.port, '3. appendonly yes, appendfsync always', BASE, false, evalOnly);
  await sharedConnection(primary.port, '4. one replica, EVALSHA + WAIT 1 (pipeline)', BASE, false, evalThenWait);
  await sharedConnection(
    primary.port,
    '4. one replica, EVALSHA + WAIT 1, auto-pipelined',
    BASE_AUTO,
    true,
    evalThenWaitAuto,
  );
  // A connection per caller: each WAIT blocks its own connection only.
  const own = await Promise.all(Array.from({ length: 32 }, () => client(primary.port, false)));
  measurements.push({
    configuration: '4. one replica, EVALSHA + WAIT 1 (pipeline), a connection per caller',
    baseline: BASE,
    calls: own.map(({ redis, sha }) => evalThenWait(redis, sha)),
    latencies: [],
    waitTimeouts: 0,
    seconds: 0,
  });

  for (let round = 0; round < ROUNDS; round += 1) {
    // Each round starts one row later, so that no row is always measured first (or right after the same one).
    for (let i = 0; i < measurements.length; i += 1) {
      await slice(measurements[(i + round) % measurements.length]);
    }
    console.error(`  round ${round + 1} of ${ROUNDS} done, load ${loadavg()[0].toFixed(2)}`);
  }
}

/** The median time of one 512-byte write and its fsync in the folder the servers' AOFs go to: what `always` waits on. */
function fsyncMedianMs(): number {
  const dir = mkdtempSync(join(tmpdir(), 'bench-redis-fsync-'));
  try {
    const fd = openSync(join(dir, 'probe'), 'w');
    const times: number[] = [];
    const block = Buffer.alloc(512, 1);
    for (let i = 0; i < 200; i += 1) {
      const start = performance.now();
      writeSync(fd, block);
      fsyncSync(fd);
      times.push(performance.now() - start);
    }
    closeSync(fd);
    return percentile(
      times.sort((a, b) => a - b),
      50,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function ms(value: number): string {
  return value < 10 ? value.toFixed(2) : value.toFixed(1);
}

const opsPerSecond = (m: Measurement) => m.latencies.length / m.seconds;

function table(): string {
  const lines = ['| configuration | callers | ops/s | vs 1 | p50 / p99 ms |', '| --- | ---: | ---: | ---: | ---: |'];
  for (const m of measurements) {
    if (m.seconds === 0) continue;
    const base = measurements.find((b) => b.configuration === m.baseline && b.calls.length === m.calls.length);
    const ratio = base && base.seconds > 0 ? `${(opsPerSecond(m) / opsPerSecond(base)).toFixed(2)}x` : '';
    const timeouts = m.waitTimeouts > 0 ? ` (${m.waitTimeouts} WAIT timed out)` : '';
    const sorted = [...m.latencies].sort((a, b) => a - b);
    lines.push(
      `| ${m.configuration}${timeouts} | ${m.calls.length} | ${Math.round(opsPerSecond(m))} | ${ratio} | ` +
        `${ms(percentile(sorted, 50))} / ${ms(percentile(sorted, 99))} |`,
    );
  }
  return lines.join('\n');
}

let failed = false;
try {
  await main();
} catch (error) {
  failed = true;
  console.error(error);
} finally {
  for (const connection of connections) connection.disconnect();
  await stopAll();
}
const left = startedPids.filter(alive);
console.error(`redis-server processes started: ${startedPids.length}, still running: ${left.length}`);
if (measurements.some((m) => m.seconds > 0)) {
  console.log(table());
  console.log(
    `\nvs 1: ops/s against configuration 1 at the same callers (the auto-pipelined rows against 1 auto-pipelined). ` +
      `${SECONDS} s per row in ${ROUNDS} interleaved slices; ${cpus().length} CPUs shared by the client, the servers ` +
      `and whatever else runs; a 512-byte write + fsync here: ${ms(fsyncMs)} ms (median).`,
  );
}
process.exitCode = failed || left.length > 0 ? 1 : 0;
