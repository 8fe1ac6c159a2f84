import 'reflect-metadata';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import type { ChildProcess } from 'node:child_process';
import { type RunningApp, spawnTypeScriptServer } from '../test/support/sample-app.js';
import { createTestDatabase } from '../test/support/test-database.js';
import { deleteRedisKeys, newRedisPrefix } from './bench-redis.js';
import { type CpuProfile, formatSummary, summarize } from './profile-summary.js';
import { consumeBatch, messageIds, openBenchQueue, RABBITMQ_URL } from './consumer-bench.js';

/**
 * `npm run bench:profile`: the bench app under `node --cpu-prof`, loaded with new keys at 64 connections on one
 * route (or with replays of completed keys), and a summary of the profile's measured window (after the warm-up). See
 * bench/README.md, "Profile". Settings: BENCH_PROFILE_ROUTE (`standard`, `transactional`, `baseline`, or `replays`:
 * `standard`'s route with REPLAY_KEYS keys in turn, completed by the warm-up; default `standard`),
 * BENCH_PROFILE_SECONDS (default 20), BENCH_PROFILE_DIR (where the `.cpuprofile` is kept; default a temporary folder),
 * BENCH_PLATFORM, BENCH_STORE and BENCH_REPLAY_CACHE (as for the bench app: `BENCH_STORE=redis` profiles it on the
 * Redis store, at BENCH_REDIS_URL, its keys under a prefix of their own, deleted after). `peer` and `peer-replays`
 * profile the peer app (`peer-app.ts`) instead, with new keys or with replays. The `consumer-…` routes profile the
 * consumer app (`consumer-app.ts`) instead: a batch of BENCH_PROFILE_MESSAGES messages (default 5000) to one of its
 * handlers, published first, then consumed at prefetch 64 and profiled, after a warm-up batch of 2000.
 */
const ROUTE = process.env.BENCH_PROFILE_ROUTE ?? 'standard';
const SECONDS = Number(process.env.BENCH_PROFILE_SECONDS ?? 20);
const WARM_UP_SECONDS = 8;
const CONNECTIONS = 64;
const REPLAY_KEYS = 500;
const PROFILED_ROUTES = ['standard', 'transactional', 'baseline', 'replays'];
const CONSUMER_ROUTES = PROFILED_ROUTES.map((route) => `consumer-${route}`);
const PEER_ROUTES = ['peer', 'peer-replays'];
const ON_PEER = PEER_ROUTES.includes(ROUTE);
/** The bench app's store (BENCH_STORE, passed on to it): its keys on Redis under a prefix of this run's own. */
const ON_REDIS = process.env.BENCH_STORE === 'redis';
const redisPrefix = ON_REDIS || ON_PEER ? newRedisPrefix() : undefined;
const MESSAGES = Number(process.env.BENCH_PROFILE_MESSAGES ?? 5000);
const WARM_UP_MESSAGES = 2000;

/** The key of each request: none on the baseline, one of REPLAY_KEYS in turn for replays, else a new one. */
let sent = 0;
const keyOfNextRequest = (): string | undefined =>
  ROUTE === 'baseline'
    ? undefined
    : ROUTE.endsWith('replays')
      ? `replay-profile-${sent++ % REPLAY_KEYS}`
      : randomUUID();

async function load(url: string, seconds: number): Promise<autocannon.Result> {
  return autocannon({
    url,
    method: 'POST',
    connections: CONNECTIONS,
    duration: seconds,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1200 }),
    requests: [
      {
        setupRequest: (request) => {
          const key = keyOfNextRequest();
          return key === undefined ? request : { ...request, headers: { ...request.headers, 'idempotency-key': key } };
        },
      },
    ],
  });
}

/** The profiler's clock: V8 stamps samples with the monotonic clock in microseconds, as `hrtime` reads it. */
const profilerNow = () => Number(process.hrtime.bigint() / 1000n);

/** The app's `.cpuprofile` once it has exited on SIGTERM (the profile is written as the process exits). */
async function profileOf(app: RunningApp & { child: ChildProcess }, dir: string): Promise<[CpuProfile, string]> {
  const exited = once(app.child, 'exit');
  app.child.kill('SIGTERM');
  await exited;
  // `CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile`: the main thread's (0), not the module loader's thread's.
  const file = readdirSync(dir).find((name) => name.includes(`.${app.child.pid}.0.`) && name.endsWith('.cpuprofile'));
  if (!file) throw new Error(`no .cpuprofile in ${dir}`);
  return [JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile, join(dir, file)];
}

/**
 * The consumer app under the profiler: a warm-up batch, then MESSAGES messages to the route's handler (`replays`:
 * `standard`'s, with the message ids of the warm-up, which completed them), published, then consumed and profiled.
 */
async function profileConsumer(dir: string, databaseUrl: string): Promise<void> {
  const route = ROUTE.slice('consumer-'.length);
  const pattern = `bench.${route === 'replays' ? 'standard' : route}`;
  const keys = route === 'replays' ? 'completed' : 'new';
  const queue = await openBenchQueue();
  try {
    const app = await spawnTypeScriptServer(
      'bench/consumer-app.ts',
      { DATABASE_URL: databaseUrl, RABBITMQ_URL, BENCH_QUEUE: queue.name, BENCH_PREFETCH: '64' },
      ['--cpu-prof', `--cpu-prof-dir=${dir}`],
    );
    try {
      // The replays' warm-up completes their ids (as many as are measured), standard mode's run.
      const warmUp = route === 'replays' ? messageIds(MESSAGES, 'completed') : messageIds(WARM_UP_MESSAGES, 'new');
      console.log(`Warming up ${pattern} with ${warmUp.length} messages, then profiling ${MESSAGES}…`);
      await queue.publish(pattern, warmUp);
      await consumeBatch(app, warmUp.length);
      await queue.publish(pattern, messageIds(MESSAGES, keys));
      const from = profilerNow();
      const run = await consumeBatch(app, MESSAGES);
      const to = profilerNow();
      const [profile, file] = await profileOf(app, dir);
      console.log(
        `${ROUTE} (prefetch 64): ${(MESSAGES / run.seconds).toFixed(0)} messages/s, ${MESSAGES} messages, ` +
          `${run.rejected} rejected, ${run.requeued} requeued; profile ${file} (window ${from}-${to} µs)\n`,
      );
      console.log(
        formatSummary(summarize(profile, { from, to }), 25, MESSAGES)
          .replaceAll('/req', '/msg')
          .replace('requests: ', 'messages: ')
          .replace('per request', 'per message'),
      );
    } finally {
      await app.close();
    }
  } finally {
    await queue.delete();
  }
}

async function main(): Promise<void> {
  const routes = [...PROFILED_ROUTES, ...PEER_ROUTES, ...CONSUMER_ROUTES];
  if (!routes.includes(ROUTE))
    throw new Error(`BENCH_PROFILE_ROUTE must be one of ${routes.join(', ')}, got ${JSON.stringify(ROUTE)}`);
  if (ON_REDIS && (ROUTE === 'transactional' || !PROFILED_ROUTES.includes(ROUTE)))
    throw new Error(`BENCH_STORE=redis profiles the bench app's routes but transactional, not ${ROUTE}`);
  const dir = process.env.BENCH_PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'idempotency-profile-'));
  const database = await createTestDatabase();
  if (CONSUMER_ROUTES.includes(ROUTE)) return profileConsumer(dir, database.url).finally(() => database.drop());
  try {
    const app = await spawnTypeScriptServer(
      ON_PEER ? 'bench/peer-app.ts' : 'bench/bench-app.ts',
      {
        DATABASE_URL: database.url,
        ...(ON_REDIS ? { BENCH_REDIS_PREFIX: redisPrefix as string } : {}),
        ...(ON_PEER ? { BENCH_PEER_PREFIX: redisPrefix as string } : {}),
      },
      ['--cpu-prof', `--cpu-prof-dir=${dir}`],
    );
    try {
      const path = ON_PEER ? 'peer' : ROUTE === 'replays' ? 'standard' : ROUTE;
      const url = `${app.url}/bench/${path}`;
      console.log(`Warming up ${url} for ${WARM_UP_SECONDS} s, then profiling it for ${SECONDS} s…`);
      await load(url, WARM_UP_SECONDS);
      const from = profilerNow();
      const result = await load(url, SECONDS);
      const to = profilerNow();
      // The profile is written as the process exits: the bench app closes and exits on SIGTERM.
      const [profile, file] = await profileOf(app, dir);
      console.log(
        `${ROUTE} @${CONNECTIONS}: ${result.requests.average.toFixed(0)} req/s, ${result.requests.total} requests,` +
          ` non-2xx ${result.non2xx}; profile ${file} (window ${from}-${to} µs)\n`,
      );
      console.log(formatSummary(summarize(profile, { from, to }), 25, result.requests.total));
    } finally {
      await app.close();
    }
  } finally {
    await database.drop();
    if (redisPrefix) await deleteRedisKeys(redisPrefix);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
