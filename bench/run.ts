import 'reflect-metadata';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';
import { freePort, startEmbeddedDatabase, type EmbeddedDatabase } from '../sample-app/embedded-database.js';
import { PLATFORMS, type Platform, type RunningApp, spawnTypeScriptServer } from '../test/support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../test/support/test-database.js';
import { DEFAULT_BATCH_LIMITS } from '../src/postgres/postgres-options.js';
import {
  type BenchResult,
  type Measure,
  PEER_NAME,
  REDIS_NEW_KEYS,
  REDIS_REPLAYS,
  REDIS_REPLAYS_UNCACHED,
} from './bench-result.js';
import type { BenchCounters } from './bench-counters.js';
import { deleteRedisKeys, newRedisPrefix, redisUnreachable } from './bench-redis.js';
import { renderChart } from './chart.js';
import { checkTargets, formatTargets, successRatio } from './targets.js';
import {
  type BenchQueue,
  CONSUMER_NAME,
  consumeBatch,
  messageIds,
  openBenchQueue,
  rabbitMqUnavailable,
  RABBITMQ_URL,
} from './consumer-bench.js';

/**
 * `npm run bench`: what idempotency costs per request, every configuration measured in the same run and
 * interleaved round by round, so that the ratios hold on a noisy machine. See bench/README.md.
 */
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const SCALE_RECORDS = Number(process.env.BENCH_SCALE_RECORDS ?? 1_000_000);
const REPLAY_KEYS = 500;
/** BENCH_CONNECTIONS: the concurrency sweep of Express's new-key rows (default 1,8,64,256); 64 must be in it. */
function concurrencyFromEnv(): number[] {
  const raw = process.env.BENCH_CONNECTIONS || '1,8,64,256';
  const counts = raw.split(',').map((count) => Number(count.trim()));
  if (!counts.includes(64) || counts.some((count) => !Number.isInteger(count) || count < 1))
    throw new Error(`BENCH_CONNECTIONS must list connection counts, 64 among them, got ${JSON.stringify(raw)}`);
  return counts;
}
const CONCURRENCY = concurrencyFromEnv();

/** The setting `name`: a comma-separated list of some of `allowed` (default all of them), in `allowed`'s order. */
function subsetFromEnv<T extends string>(name: string, allowed: readonly T[]): T[] {
  const raw = process.env[name] || allowed.join(',');
  const listed = raw.split(',').map((item) => item.trim());
  for (const item of listed)
    if (!(allowed as readonly string[]).includes(item))
      throw new Error(`${name} must list some of ${allowed.join(', ')}, got ${JSON.stringify(raw)}`);
  return allowed.filter((item) => listed.includes(item));
}
/** BENCH_PLATFORMS: which platforms' rows to measure (default both: `express,fastify`). */
const MEASURED_PLATFORMS = subsetFromEnv('BENCH_PLATFORMS', PLATFORMS);
const STORES = ['postgres', 'redis'] as const;
type Store = (typeof STORES)[number];
/**
 * BENCH_STORES: which stores' rows to measure (default both: `postgres,redis`). A row names those that measure it
 * (`measuredWith`): the baselines, the peer and ours on PostgreSQL in standard mode at 64 connections, which the
 * Redis rows are read beside, are measured with either.
 */
const MEASURED_STORES = subsetFromEnv('BENCH_STORES', STORES);

type Keys = 'none' | 'new' | 'completed' | 'one';
interface Config {
  name: string;
  path: string;
  connections: number;
  keys: Keys;
  /**
   * Which app: on Express, on an empty records table, the same without its replay cache or without coalesced
   * statements (`batching: false`), or on a table holding
   * SCALE_RECORDS records; or on Fastify, on the same database as the first; or the peer app (`peer-app.ts`, on
   * Express or on Fastify, on the same database as the first, its records in Redis); or on Express, on the first one's
   * database through PgBouncer in transaction mode, with `transactionPooler: true`; or the consumer app
   * (`consumer-app.ts`, on the same database as the first), whose rows are messages through RabbitMQ (`path` is then
   * the pattern, and `connections` the prefetch); or ours on the Redis store, its charges on the first one's database,
   * on Express, the same without its replay cache (on the same records), or on Fastify.
   */
  target: Target;
  platform: Platform;
  /** The baseline it is compared with: its own platform's. */
  baseline: string;
  /** The stores of BENCH_STORES any of which measures it: `postgres` unless said. */
  measuredWith?: Store[];
}
type Target =
  | 'empty'
  | 'uncached'
  | 'unbatched'
  | 'large'
  | 'fastify'
  | 'peer'
  | 'peer-fastify'
  | 'pgbouncer'
  | 'consumer'
  | 'redis'
  | 'redis-uncached'
  | 'redis-fastify';
/** Measured with either store: the rows the Redis rows are read beside (see MEASURED_STORES). */
const WITH_EITHER: Store[] = ['postgres', 'redis'];

/** Express's rows keep their names; another platform's are prefixed with it ("fastify: baseline @64"). */
const id = (config: Pick<Config, 'name' | 'connections' | 'platform'>) =>
  `${config.platform === 'express' ? '' : `${config.platform}: `}${config.name} @${config.connections}`;

/** The rows measured on Express (their platform is added below). */
const expressConfigs: Omit<Config, 'platform'>[] = [
  ...CONCURRENCY.flatMap((connections) => {
    const baseline = id({ name: 'baseline', connections, platform: 'express' });
    // At 64 connections, the baseline and standard new keys are read beside the Redis rows too.
    const measuredWith = connections === 64 ? WITH_EITHER : undefined;
    return [
      { name: 'baseline', path: '/bench/baseline', connections, keys: 'none', target: 'empty', baseline, measuredWith },
      {
        name: 'standard, new keys',
        path: '/bench/standard',
        connections,
        keys: 'new',
        target: 'empty',
        baseline,
        measuredWith,
      },
      {
        name: 'transactional, new keys',
        path: '/bench/transactional',
        connections,
        keys: 'new',
        target: 'empty',
        baseline,
      },
      // The same new-key run against a table of a million records, and one without coalesced statements.
      ...(connections === 64
        ? [
            {
              name: 'standard, new keys, a statement each',
              path: '/bench/standard',
              connections,
              keys: 'new',
              target: 'unbatched',
              baseline,
            } satisfies Omit<Config, 'platform'>,
            {
              name: `standard, new keys, ${SCALE_RECORDS.toLocaleString('en')} records`,
              path: '/bench/standard',
              connections,
              keys: 'new',
              target: 'large',
              baseline,
            } satisfies Omit<Config, 'platform'>,
          ]
        : []),
    ] satisfies Omit<Config, 'platform'>[];
  }),
  {
    name: 'replays',
    path: '/bench/standard',
    connections: 64,
    keys: 'completed',
    target: 'empty',
    baseline: 'baseline @64',
    measuredWith: WITH_EITHER,
  },
  {
    name: 'replays, from the database',
    path: '/bench/standard',
    connections: 64,
    keys: 'completed',
    target: 'uncached',
    baseline: 'baseline @64',
  },
  // What a step costs: the same three inserts, one after another and in three steps.
  ...[
    { name: 'three inserts, new keys', path: '/bench/unstepped' },
    { name: 'three inserts in three steps, new keys', path: '/bench/stepped' },
    { name: 'three inserts in three steps (not transactional), new keys', path: '/bench/stepped-plain' },
  ].map((row) => ({
    ...row,
    connections: 64,
    keys: 'new' as const,
    target: 'empty' as const,
    baseline: 'baseline @64',
  })),
  {
    name: 'contention (one key)',
    path: '/bench/standard',
    connections: 64,
    keys: 'one',
    target: 'empty',
    baseline: 'baseline @64',
  },
];

/**
 * The same routes on Fastify, at 64 connections, each compared with the Fastify baseline; the "vs express" column
 * compares each with the same configuration on Express (the Fastify baseline with the Express one).
 */
const fastifyBaseline = id({ name: 'baseline', connections: 64, platform: 'fastify' });
const fastifyConfigs: Config[] = (
  [
    { name: 'baseline', path: '/bench/baseline', keys: 'none', measuredWith: WITH_EITHER },
    { name: 'standard, new keys', path: '/bench/standard', keys: 'new', measuredWith: WITH_EITHER },
    { name: 'transactional, new keys', path: '/bench/transactional', keys: 'new' },
    { name: 'replays', path: '/bench/standard', keys: 'completed', measuredWith: WITH_EITHER },
  ] satisfies Pick<Config, 'name' | 'path' | 'keys' | 'measuredWith'>[]
).map((config) => ({
  ...config,
  connections: 64,
  target: 'fastify',
  platform: 'fastify',
  baseline: fastifyBaseline,
}));

/**
 * Ours on the Redis store and the peer, `@node-idempotency/nestjs` on the same Redis, each guarding the same charge
 * insert on `platform` at 64 connections, compared with its baseline: new keys and replays (ours from the replay
 * cache, and on Express also read from Redis, as an instance that has not seen the key). Each app's group is skipped
 * when Redis, or its packages, are not there. The peer on Express is measured with either store (our replays on
 * PostgreSQL have a target against it), the rest with the Redis rows.
 */
function redisConfigs(platform: Platform): Config[] {
  const [ours, peer] =
    platform === 'express' ? (['redis', 'peer'] as const) : (['redis-fastify', 'peer-fastify'] as const);
  const rows: Pick<Config, 'name' | 'path' | 'keys' | 'target' | 'measuredWith'>[] = [
    { name: REDIS_NEW_KEYS, path: '/bench/standard', keys: 'new', target: ours },
    { name: REDIS_REPLAYS, path: '/bench/standard', keys: 'completed', target: ours },
    ...(platform === 'express'
      ? [
          {
            name: REDIS_REPLAYS_UNCACHED,
            path: '/bench/standard',
            keys: 'completed' as const,
            target: 'redis-uncached' as const,
          },
        ]
      : []),
    { name: `${PEER_NAME}, new keys`, path: '/bench/peer', keys: 'new', target: peer },
    { name: `${PEER_NAME}, replays`, path: '/bench/peer', keys: 'completed', target: peer },
  ];
  return rows.map((config) => ({
    ...config,
    connections: 64,
    platform,
    baseline: id({ name: 'baseline', connections: 64, platform }),
    measuredWith: config.target === 'peer' ? WITH_EITHER : ['redis'],
  }));
}

/**
 * The baseline and the new-key routes on Express through PgBouncer in transaction mode (`BENCH_PGBOUNCER_URL`, else
 * `PGBOUNCER_URL`; `scripts/start-pgbouncer.sh`), the store with `transactionPooler: true`, at 64 connections, compared
 * with the baseline through the same PgBouncer: skipped when it is not there.
 */
const PGBOUNCER = 'through PgBouncer';
const PGBOUNCER_URL = process.env.BENCH_PGBOUNCER_URL || process.env.PGBOUNCER_URL;
const pgbouncerConfigs: Config[] = (
  [
    { name: `${PGBOUNCER}: baseline`, path: '/bench/baseline', keys: 'none' },
    { name: `${PGBOUNCER}: standard, new keys`, path: '/bench/standard', keys: 'new' },
    { name: `${PGBOUNCER}: transactional, new keys`, path: '/bench/transactional', keys: 'new' },
  ] satisfies Pick<Config, 'name' | 'path' | 'keys'>[]
).map((config) => ({
  ...config,
  connections: 64,
  target: 'pgbouncer',
  platform: 'express',
  baseline: `${PGBOUNCER}: baseline @64`,
}));

/**
 * Messages consumed through RabbitMQ by the consumer app (`consumer-app.ts`), `BENCH_MESSAGES` per batch, at the same
 * prefetch: the charge insert acknowledged by the handler (the baseline), and `@Idempotent()` in standard and in
 * transactional mode with new message ids, and standard mode with every message a duplicate of a completed one.
 * Measured with Express's rows (`BENCH_CONSUMERS`: `off` skips them, `only` measures them alone); skipped when
 * RabbitMQ cannot be reached.
 */
const CONSUMER_MESSAGES = Number(process.env.BENCH_MESSAGES ?? 1000);
const CONSUMER_PREFETCH = 64;
const consumerConfigs: Config[] = (
  [
    { name: `${CONSUMER_NAME}: baseline`, path: 'bench.baseline', keys: 'new' },
    { name: `${CONSUMER_NAME}: standard, new ids`, path: 'bench.standard', keys: 'new' },
    { name: `${CONSUMER_NAME}: transactional, new ids`, path: 'bench.transactional', keys: 'new' },
    { name: `${CONSUMER_NAME}: replays`, path: 'bench.standard', keys: 'completed' },
  ] satisfies Pick<Config, 'name' | 'path' | 'keys'>[]
).map((config) => ({
  ...config,
  connections: CONSUMER_PREFETCH,
  target: 'consumer',
  platform: 'express',
  baseline: `${CONSUMER_NAME}: baseline @${CONSUMER_PREFETCH}`,
}));

/** BENCH_CONSUMERS: `on` (the default: with Express's rows), `off`, or `only` (the consumer rows alone). */
function consumersFromEnv(): 'on' | 'off' | 'only' {
  const raw = process.env.BENCH_CONSUMERS || 'on';
  if (raw !== 'on' && raw !== 'off' && raw !== 'only')
    throw new Error(`BENCH_CONSUMERS must be on, off or only, got ${JSON.stringify(raw)}`);
  return raw;
}
const CONSUMERS = consumersFromEnv();

if (CONSUMERS === 'only' && !MEASURED_STORES.includes('postgres'))
  throw new Error(
    'BENCH_CONSUMERS=only measures the consumer rows, which are on PostgreSQL: BENCH_STORES must list it',
  );

const allConfigs: Config[] = (
  CONSUMERS === 'only'
    ? consumerConfigs
    : [
        ...(MEASURED_PLATFORMS.includes('express')
          ? [
              ...expressConfigs.map((config) => ({ ...config, platform: 'express' as const })),
              ...redisConfigs('express'),
              ...pgbouncerConfigs,
              ...(CONSUMERS === 'on' ? consumerConfigs : []),
            ]
          : []),
        ...(MEASURED_PLATFORMS.includes('fastify') ? [...fastifyConfigs, ...redisConfigs('fastify')] : []),
      ]
).filter((config) => (config.measuredWith ?? ['postgres']).some((store) => MEASURED_STORES.includes(store)));

/** Why the peer rows cannot be measured (Redis not reachable, or its packages not loading), or undefined. */
async function peerUnavailable(): Promise<string | undefined> {
  const unreachable = await redisUnreachable();
  if (unreachable) return unreachable;
  try {
    await import('@node-idempotency/nestjs');
    await import('@node-idempotency/storage-adapter-redis');
  } catch (error) {
    return `@node-idempotency/nestjs or its Redis adapter does not load (${(error as Error).message})`;
  }
  return undefined;
}

/**
 * The apps on Redis, in two groups, each skipped as one when it cannot run (Redis not reachable, the peer's packages
 * not loading, or an app not starting): its rows are dropped, the rest of the run goes on, and the reason is printed
 * and kept in `latest.json` (`peerSkipped`, `redisSkipped`).
 */
const REDIS_GROUPS = {
  peer: { rows: `peer rows (${PEER_NAME})`, targets: ['peer', 'peer-fastify'], unavailable: peerUnavailable },
  redis: {
    rows: 'rows of ours on Redis',
    targets: ['redis', 'redis-uncached', 'redis-fastify'],
    unavailable: redisUnreachable,
  },
} satisfies Record<string, { rows: string; targets: Target[]; unavailable: () => Promise<string | undefined> }>;
type RedisGroup = keyof typeof REDIS_GROUPS;
const groupOf = (target: Target) =>
  (Object.keys(REDIS_GROUPS) as RedisGroup[]).find((group) =>
    (REDIS_GROUPS[group].targets as Target[]).includes(target),
  );

/** `url` (a database of the PostgreSQL server) reached through PgBouncer, whose wildcard entry forwards it by name. */
function throughPgBouncer(url: string): string {
  const pooled = new URL(url);
  pooled.host = new URL(PGBOUNCER_URL as string).host;
  return pooled.toString();
}

/** Why the rows through PgBouncer cannot be measured on `database` (no PgBouncer, or it does not reach it), or undefined. */
async function pgbouncerUnavailable(database: TestDatabase, embedded: boolean): Promise<string | undefined> {
  if (!PGBOUNCER_URL) return 'neither BENCH_PGBOUNCER_URL nor PGBOUNCER_URL is set (scripts/start-pgbouncer.sh)';
  if (embedded) return 'the bench runs on an embedded PostgreSQL (DATABASE_URL unset), which PgBouncer does not front';
  const client = new pg.Client({ connectionString: throughPgBouncer(database.url), connectionTimeoutMillis: 2000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (error) {
    return `PgBouncer at ${PGBOUNCER_URL} does not reach the bench's database (${(error as Error).message})`;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The app that completes a replay row's keys (`replay-<app>-<n>`): the row's own, or, for an app without a replay
 * cache, the app whose records it reads, as an instance that has not seen them would.
 */
const SEEDED_BY: Partial<Record<Target, Target>> = { uncached: 'empty', 'redis-uncached': 'redis' };
const seederOf = (config: Pick<Config, 'target'>) => SEEDED_BY[config.target] ?? config.target;

async function measure(
  app: RunningApp,
  config: Config,
  round: number,
  checkpoints: () => Promise<number>,
  seconds = SECONDS,
): Promise<Measure> {
  const oneKey = `contention-${round}-${randomUUID()}`;
  let sent = 0;
  const keyFor: Record<Keys, () => string | undefined> = {
    none: () => undefined,
    new: () => randomUUID(),
    completed: () => `replay-${seederOf(config)}-${sent++ % REPLAY_KEYS}`,
    one: () => oneKey,
  };
  const checkpointsBefore = await checkpoints();
  const countersBefore = await countersOf(app);
  const result = await autocannon({
    url: `${app.url}${config.path}`,
    method: 'POST',
    connections: config.connections,
    duration: seconds,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1200 }),
    requests: [
      {
        setupRequest: (request) => {
          const key = keyFor[config.keys]();
          return key ? { ...request, headers: { ...request.headers, 'idempotency-key': key } } : request;
        },
      },
    ],
  });
  const statuses = Object.fromEntries(
    Object.entries(
      (result as unknown as { statusCodeStats: Record<string, { count: number }> }).statusCodeStats ?? {},
    ).map(([status, { count }]) => [status, count]),
  );
  const countersAfter = await countersOf(app);
  const requests = Math.max(1, result.requests.total);
  return {
    requestsPerSecond: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    max: result.latency.max,
    errors: result.errors + result.timeouts,
    statuses,
    checkpoints: (await checkpoints()) - checkpointsBefore,
    roundTripsPerRequest:
      countersAfter.statements === null || countersBefore.statements === null
        ? null
        : (countersAfter.statements - countersBefore.statements) / requests,
    cpuMicrosPerRequest: (countersAfter.cpuMicros - countersBefore.cpuMicros) / requests,
  };
}

/** The app's counters (`bench-counters.ts`), read between rows. */
async function countersOf(app: RunningApp): Promise<BenchCounters> {
  const response = await fetch(`${app.url}/bench/counters`);
  if (!response.ok) throw new Error(`GET /bench/counters answered ${response.status}`);
  return (await response.json()) as BenchCounters;
}

/** The rows in a random order: no row always follows the same neighbour, whose load it would inherit. */
function shuffled<T>(rows: readonly T[]): T[] {
  const order = [...rows];
  for (let i = order.length - 1; i > 0; i -= 1) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/**
 * A consumer row's batch: CONSUMER_MESSAGES events published to its pattern (new message ids, or the completed ones
 * of the replays), then consumed; messages per second from the gate's opening to the last settlement, and each
 * message's time to its settlement as latency. A message rejected or given back shows among the non-2xx answers.
 */
async function measureConsumer(
  app: RunningApp,
  queue: BenchQueue,
  config: Config,
  checkpoints: () => Promise<number>,
): Promise<Measure> {
  await queue.publish(config.path, messageIds(CONSUMER_MESSAGES, config.keys === 'completed' ? 'completed' : 'new'));
  const checkpointsBefore = await checkpoints();
  const run = await consumeBatch(app, CONSUMER_MESSAGES);
  return {
    requestsPerSecond: CONSUMER_MESSAGES / run.seconds,
    p50: run.p50,
    p99: run.p99,
    max: run.max,
    errors: 0,
    statuses: Object.fromEntries(
      Object.entries({ rejected: run.rejected, requeued: run.requeued }).filter(([, count]) => count > 0),
    ),
    checkpoints: (await checkpoints()) - checkpointsBefore,
    roundTripsPerRequest: null,
    cpuMicrosPerRequest: null,
  };
}

/**
 * Completed keys for the replay configurations: the same body as the measured requests, so they replay. Each app
 * with replay rows completes its own keys (`replay-<app>-<n>`, see `seederOf`), so that its replays come from its
 * replay cache and carry the outcomes it stored; the peer apps their own (in Redis).
 */
async function seedReplayKeys(app: RunningApp, prefix: string, path = '/bench/standard'): Promise<void> {
  for (let i = 0; i < REPLAY_KEYS; i += 25) {
    await Promise.all(
      Array.from({ length: 25 }, (_, j) =>
        fetch(`${app.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `replay-${prefix}-${i + j}` },
          body: JSON.stringify({ amount: 1200 }),
        }).then((response) => response.arrayBuffer()),
      ),
    );
  }
}

/** SCALE_RECORDS completed records of the measured endpoint, in one statement. */
async function seedLargeTable(db: TestDatabase): Promise<void> {
  await db.query(
    `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, completed_at,
                                      expires_at, response_status, response_headers, response_body)
     SELECT 'bench', 'POST /bench/standard', md5(i::text), md5('fp' || i), 'completed', gen_random_uuid(), now(), now(),
            now() + interval '1 day', 201, '{"content-type": "application/json; charset=utf-8"}', convert_to('{"id":"x"}', 'UTF8')
     FROM generate_series(1, $1::int) AS i`,
    [SCALE_RECORDS],
  );
  await db.query('VACUUM ANALYZE idempotency_records');
  // Write the seeding's dirty pages out now, not in a checkpoint that would land in the middle of a measurement.
  await db.query('CHECKPOINT');
}

/**
 * What autovacuum does on a server that runs it: the tables' statistics follow their growth, and a statement planned
 * once per connection (each of the store's) is planned again after each ANALYZE of its table. On a server with
 * autovacuum off (this machine's shared one), the plans made while the bench's tables were new would be kept for the
 * whole run: the bench analyzes its databases before each configuration instead, and says so.
 */
async function statisticsKeeper(databases: TestDatabase[]): Promise<() => Promise<void>> {
  const [{ autovacuum }] = await databases[0].query<{ autovacuum: string }>(
    "SELECT current_setting('autovacuum') AS autovacuum",
  );
  if (autovacuum === 'on') return async () => undefined;
  console.log(
    'autovacuum is off on this server: the bench analyzes its databases before each configuration, as autovacuum would',
  );
  return async () => {
    for (const database of databases) await database.query('ANALYZE');
  };
}

/**
 * The checkpoints the server has completed (timed or requested, by anyone: another database's `DROP DATABASE`
 * requests one), from `pg_stat_checkpointer` (PostgreSQL 17 and later) or `pg_stat_bgwriter`. After each, the first
 * change of an index leaf writes the whole page to the WAL, which costs the million-record table's claims far more
 * than the empty table's (docs/performance.md): each row counts those that ended while it was measured.
 */
async function checkpointCounter(db: TestDatabase): Promise<() => Promise<number>> {
  const [{ checkpointer }] = await db.query<{ checkpointer: boolean }>(
    "SELECT to_regclass('pg_catalog.pg_stat_checkpointer') IS NOT NULL AS checkpointer",
  );
  const sql = checkpointer
    ? 'SELECT num_timed + num_requested AS n FROM pg_stat_checkpointer'
    : 'SELECT checkpoints_timed + checkpoints_req AS n FROM pg_stat_bgwriter';
  return async () => Number((await db.query<{ n: string }>(sql))[0].n);
}

function aggregate(config: Config, measures: Measure[]): Omit<BenchResult, 'ratio' | 'ratioToExpress'> {
  const mean = (pick: (m: Measure) => number) => measures.reduce((sum, m) => sum + pick(m), 0) / measures.length;
  const statuses: Record<string, number> = {};
  for (const m of measures)
    for (const [status, count] of Object.entries(m.statuses)) statuses[status] = (statuses[status] ?? 0) + count;
  return {
    config: id(config),
    name: config.name,
    connections: config.connections,
    platform: config.platform,
    requestsPerSecond: mean((m) => m.requestsPerSecond),
    p50: mean((m) => m.p50),
    p99: mean((m) => m.p99),
    max: Math.max(...measures.map((m) => m.max)),
    errors: measures.reduce((sum, m) => sum + m.errors, 0),
    statuses,
    checkpoints: measures.reduce((sum, m) => sum + m.checkpoints, 0),
    roundTripsPerRequest: meanOrNull(measures.map((m) => m.roundTripsPerRequest)),
    cpuMicrosPerRequest: meanOrNull(measures.map((m) => m.cpuMicrosPerRequest)),
  };
}

function meanOrNull(values: (number | null)[]): number | null {
  const known = values.filter((value): value is number => value !== null);
  return known.length === 0 ? null : known.reduce((sum, value) => sum + value, 0) / known.length;
}

/**
 * Ours on Redis against the peer on the same Redis, row by row at 64 connections, on each platform measured: their
 * 2xx answers per second (as the targets compare them), side by side in this run.
 */
function printRedisRatios(results: BenchResult[]): void {
  const lines = MEASURED_PLATFORMS.flatMap((platform) => {
    const row = (name: string) => results.find((r) => r.config === id({ name, connections: 64, platform }));
    const ratio = (ours: string, peer: string) => {
      const [measured, compared] = [row(ours), row(`${PEER_NAME}, ${peer}`)];
      return measured && compared ? `${successRatio(measured, compared).toFixed(2)}x` : '-';
    };
    if (!row(REDIS_NEW_KEYS) && !row(REDIS_REPLAYS)) return [];
    const uncached = row(REDIS_REPLAYS_UNCACHED) ? `, ${ratio(REDIS_REPLAYS_UNCACHED, 'replays')} read from Redis` : '';
    return [
      `  ${platform}: new keys ${ratio(REDIS_NEW_KEYS, 'new keys')}, replays ${ratio(REDIS_REPLAYS, 'replays')}` +
        ` from the replay cache${uncached}`,
    ];
  });
  if (lines.length > 0)
    console.log(`\nOurs on Redis ÷ the peer, 2xx answers per second at 64 connections:\n${lines.join('\n')}`);
}

function printTable(results: BenchResult[]): void {
  const rows = results.map((r) => [
    r.config,
    r.requestsPerSecond.toFixed(0),
    `${r.ratio.toFixed(2)}x`,
    r.ratioToExpress === null ? '-' : `${r.ratioToExpress.toFixed(2)}x`,
    r.p50.toFixed(1),
    r.p99.toFixed(1),
    r.max.toFixed(0),
    String(r.errors),
    String(r.checkpoints),
    r.roundTripsPerRequest === null ? '-' : r.roundTripsPerRequest.toFixed(2),
    r.cpuMicrosPerRequest === null ? '-' : r.cpuMicrosPerRequest.toFixed(0),
    Object.entries(r.statuses)
      .filter(([status]) => !status.startsWith('2'))
      .map(([status, count]) => `${status}: ${count}`)
      .join(', ') || '-',
  ]);
  const header = [
    'configuration',
    'req/s',
    'vs baseline',
    'vs express',
    'p50 ms',
    'p99 ms',
    'max ms',
    'errors',
    'checkpoints',
    'trips/req',
    'CPU us/req',
    'non-2xx',
  ];
  const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 0 || i === header.length - 1 ? cell.padEnd(widths[i]) : cell.padStart(widths[i])))
      .join('  ');
  console.log([line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n'));
}

/** The connections each app's pool may open. */
const POOL_SIZE = 20;

/**
 * Each app's pool: POOL_SIZE, or what the server can give each of the apps that reach it directly when that is less
 * (its max_connections, less the connections open now, 10 for PgBouncer's and the bench's own, and the batch
 * connections of the apps on the PostgreSQL store). The full bench runs up to eleven such apps, and PostgreSQL's
 * default of 100 connections cannot give each 20: the last to fill its pool was refused connections, answered 503,
 * and measured that.
 */
async function appPoolSize(db: TestDatabase, directApps: number, batchingApps: number): Promise<string> {
  const [{ max, used }] = await db.query<{ max: number; used: number }>(
    "SELECT current_setting('max_connections')::int AS max, (SELECT count(*) FROM pg_stat_activity)::int AS used",
  );
  // An app on the PostgreSQL store opens its batches' own connections beside its pool (2 × maxInFlight); an app on
  // Redis (ours, the peer's) only its pool, for the charges.
  const batches = batchingApps * 2 * DEFAULT_BATCH_LIMITS.maxInFlight;
  const fitting = Math.floor((max - used - 10 - batches) / Math.max(1, directApps));
  if (fitting >= POOL_SIZE) return String(POOL_SIZE);
  if (fitting < 4)
    throw new Error(`The server has ${max - used} free connections of ${max}: too few for ${directApps} bench apps`);
  console.log(`Each app's pool has ${fitting} connections, not ${POOL_SIZE}: the server allows ${max} in all`);
  return String(fitting);
}

async function main(): Promise<void> {
  let embedded: EmbeddedDatabase | undefined;
  if (!process.env.DATABASE_URL) {
    embedded = await startEmbeddedDatabase(
      mkdtempSync(join(tmpdir(), 'idempotency-bench-pg-')),
      await freePort(),
      false,
    );
    process.env.DATABASE_URL = embedded.url;
  }
  let configs = allConfigs;
  const redisSkipped: Partial<Record<RedisGroup, string>> = {};
  const skipRedisGroup = (group: RedisGroup, reason: string) => {
    redisSkipped[group] = reason;
    configs = configs.filter((config) => groupOf(config.target) !== group);
    console.log(`Skipping the ${REDIS_GROUPS[group].rows}: ${reason}`);
  };
  for (const group of Object.keys(REDIS_GROUPS) as RedisGroup[]) {
    if (!configs.some((config) => groupOf(config.target) === group)) continue;
    const reason = await REDIS_GROUPS[group].unavailable();
    if (reason) skipRedisGroup(group, reason);
  }
  let consumersSkipped: string | undefined;
  if (configs.some((config) => config.target === 'consumer')) {
    consumersSkipped = await rabbitMqUnavailable();
    if (consumersSkipped) {
      configs = configs.filter((config) => config.target !== 'consumer');
      console.log(`Skipping the ${CONSUMER_NAME} rows: ${consumersSkipped}`);
    }
  }
  let targets = new Set(configs.map((config) => config.target));
  const databases: { empty: TestDatabase; large?: TestDatabase } = {
    empty: await createTestDatabase(),
    ...(targets.has('large') ? { large: await createTestDatabase() } : {}),
  };
  let pgbouncerSkipped: string | undefined;
  if (targets.has('pgbouncer')) {
    pgbouncerSkipped = await pgbouncerUnavailable(databases.empty, embedded !== undefined);
    if (pgbouncerSkipped) {
      configs = configs.filter((config) => config.target !== 'pgbouncer');
      targets = new Set(configs.map((config) => config.target));
      console.log(`Skipping the rows ${PGBOUNCER}: ${pgbouncerSkipped}`);
    }
  }
  const direct = [...targets].filter((target) => target !== 'pgbouncer');
  const poolSize = await appPoolSize(
    databases.empty,
    direct.length,
    direct.filter((target) => groupOf(target) === undefined).length,
  );
  // The run's keys in Redis, each app's under its own name after the run's prefix, deleted at its end.
  const redisPrefix = newRedisPrefix();
  const onRedis = (app: string) => ({
    DATABASE_URL: databases.empty.url,
    BENCH_STORE: 'redis',
    BENCH_REDIS_PREFIX: `${redisPrefix}${app}:`,
  });
  const peerEnv = (app: string) => ({ DATABASE_URL: databases.empty.url, BENCH_PEER_PREFIX: `${redisPrefix}${app}` });
  // Only the apps that the measured configurations need (BENCH_PLATFORMS=fastify needs the Fastify one alone).
  const env: Record<Target, () => Record<string, string>> = {
    empty: () => ({ DATABASE_URL: databases.empty.url }),
    uncached: () => ({ DATABASE_URL: databases.empty.url, BENCH_REPLAY_CACHE: 'off' }),
    unbatched: () => ({ DATABASE_URL: databases.empty.url, BENCH_BATCHING: 'off' }),
    large: () => ({ DATABASE_URL: (databases.large as TestDatabase).url }),
    fastify: () => ({ DATABASE_URL: databases.empty.url, BENCH_PLATFORM: 'fastify' }),
    pgbouncer: () => ({ DATABASE_URL: throughPgBouncer(databases.empty.url), BENCH_TRANSACTION_POOLER: 'on' }),
    peer: () => peerEnv('peer'),
    'peer-fastify': () => ({ ...peerEnv('peer-fastify'), BENCH_PLATFORM: 'fastify' }),
    redis: () => onRedis('redis'),
    // The same records as the first (which completes the replays' keys), read without the replay cache.
    'redis-uncached': () => ({ ...onRedis('redis'), BENCH_REPLAY_CACHE: 'off' }),
    'redis-fastify': () => ({ ...onRedis('redis-fastify'), BENCH_PLATFORM: 'fastify' }),
    // The run's own quorum queue, made before the app consumes it.
    consumer: () => ({
      DATABASE_URL: databases.empty.url,
      RABBITMQ_URL,
      BENCH_QUEUE: (queue as BenchQueue).name,
      BENCH_PREFETCH: String(CONSUMER_PREFETCH),
    }),
  };
  const checkpoints = await checkpointCounter(databases.empty);
  const keepStatistics = await statisticsKeeper(Object.values(databases));
  const apps: Partial<Record<Target, RunningApp>> = {};
  /** An app on Redis was started (Redis was reachable): the run's keys are deleted at its end. */
  let startedOnRedis = false;
  let queue: BenchQueue | undefined;
  try {
    if (targets.has('consumer')) queue = await openBenchQueue();
    for (const target of targets) {
      const group = groupOf(target);
      if (group && redisSkipped[group]) continue; // another app of its group did not start
      // Every app gets the same pool (BENCH_POOL_SIZE); the bench app is on PostgreSQL unless its target says (not
      // whatever BENCH_STORE the bench itself was run with).
      const appEnv = { BENCH_STORE: 'postgres', ...env[target](), BENCH_POOL_SIZE: poolSize };
      if (target === 'consumer') apps.consumer = await spawnTypeScriptServer('bench/consumer-app.ts', appEnv);
      else if (!group) apps[target] = await spawnTypeScriptServer('bench/bench-app.ts', appEnv);
      else
        try {
          startedOnRedis = true;
          apps[target] = await spawnTypeScriptServer(`bench/${group === 'peer' ? 'peer' : 'bench'}-app.ts`, appEnv);
        } catch (error) {
          const output = (error as Error).message.split('\n').slice(0, 6).join(' ');
          skipRedisGroup(group, `the ${target} app did not start: ${output}`);
          for (const started of REDIS_GROUPS[group].targets) {
            await apps[started]?.close();
            delete apps[started];
          }
        }
    }
    // Each replay row's keys, completed by the app that seeds them (see `seederOf`), on the row's route.
    const seeding = new Map(
      configs.filter((c) => c.keys === 'completed' && c.target !== 'consumer').map((c) => [seederOf(c), c.path]),
    );
    const records = databases.large ? `${SCALE_RECORDS.toLocaleString('en')} records and ` : '';
    if (databases.large || seeding.size > 0)
      console.log(`Seeding ${records}${REPLAY_KEYS} completed keys for each of ${[...seeding.keys()].join(', ')}…`);
    if (databases.large) await seedLargeTable(databases.large);
    for (const [target, path] of seeding) await seedReplayKeys(apps[target] as RunningApp, target, path);
    // A fresh process needs several seconds of full load before V8 has optimized its request path: an app whose
    // code is not optimized yet runs at a fraction of its speed, which would show as a cost of its table.
    // Each app warms up on its own new-key route at 64 connections, or the first one's (the same routes).
    // The consumer app consumes one batch of each of its rows, unmeasured, the first of them (standard mode, with
    // the replays' message ids) completing the messages that the replays duplicate.
    if (apps.consumer) {
      console.log(`Warming up the consumer app: one batch of ${CONSUMER_MESSAGES} messages per consumer row…`);
      const consumerRows = configs.filter((c) => c.target === 'consumer');
      const seeding = consumerRows.find((c) => c.path === 'bench.standard' && c.keys === 'new') as Config;
      for (const config of [{ ...seeding, keys: 'completed' as const }, ...consumerRows])
        await measureConsumer(apps.consumer, queue as BenchQueue, config, checkpoints);
    }
    const fullLoad = configs.find((c) => c.keys === 'new' && c.connections === 64) as Config;
    for (const [target, app] of Object.entries(apps)) {
      if (target === 'consumer') continue;
      const own = configs.find((c) => c.target === target && c.keys === 'new' && c.connections === 64);
      await measure(app, own ?? fullLoad, 0, checkpoints, Math.max(SECONDS, 8));
    }
    const measures = new Map<Config, Measure[]>(configs.map((config) => [config, []]));
    for (let round = 1; round <= ROUNDS; round += 1) {
      for (const config of shuffled(configs)) {
        process.stdout.write(`round ${round}/${ROUNDS}: ${id(config)}…\n`);
        // One second of the same load first, not measured: the other configurations, on the other database,
        // have pushed this one's pages out of PostgreSQL's shared buffers, which a service under steady load
        // keeps (the million-record table and its indexes are larger than the default 128 MB).
        const app = apps[config.target] as RunningApp;
        await keepStatistics();
        if (config.target === 'consumer') {
          // Replays: one unmeasured batch of the same duplicates first, as the HTTP rows' unmeasured second: the
          // replay cache's entries last 60 s, and a round is longer, so the measured batch replays from the cache
          // (as the HTTP replays row does), not from the records.
          if (config.keys === 'completed') await measureConsumer(app, queue as BenchQueue, config, checkpoints);
          measures.get(config)?.push(await measureConsumer(app, queue as BenchQueue, config, checkpoints));
          continue;
        }
        await measure(app, config, round, checkpoints, 1);
        measures.get(config)?.push(await measure(app, config, round, checkpoints));
      }
    }
    const aggregated = configs.map((config) => aggregate(config, measures.get(config) ?? []));
    const byId = new Map(aggregated.map((result) => [result.config, result]));
    const results: BenchResult[] = configs.map((config, i) => {
      const onExpress = config.platform === 'express' ? undefined : byId.get(id({ ...config, platform: 'express' }));
      return {
        ...aggregated[i],
        ratio: aggregated[i].requestsPerSecond / (byId.get(config.baseline)?.requestsPerSecond ?? Number.NaN),
        ratioToExpress: onExpress ? aggregated[i].requestsPerSecond / onExpress.requestsPerSecond : null,
      };
    });
    const consumerRows = configs.some((config) => config.target === 'consumer');
    console.log(
      (CONSUMERS === 'only'
        ? `\n${ROUNDS} interleaved rounds;`
        : `\n${ROUNDS} interleaved rounds of ${SECONDS} s per configuration, on ${MEASURED_PLATFORMS.join(' and ')}; latency in ms;` +
          ' ratios to the baseline of the same platform at the same concurrency; "vs express": a row to the same' +
          ' configuration on Express.') +
        (consumerRows
          ? ` ${CONSUMER_NAME} rows: messages per second (the req/s column) of batches of ${CONSUMER_MESSAGES}` +
            ` published first, "@${CONSUMER_PREFETCH}" the prefetch, latency a message's time from its delivery to` +
            ' its settlement (ms), ratios to the consumer baseline (which acknowledges in its handler).'
          : '') +
        '\n',
    );
    printTable(results);
    if (results.some((result) => result.platform === 'express' && result.name.startsWith(PEER_NAME))) {
      const ours = results.filter((r) => r.connections === 64 && r.platform === 'express' && r.name !== 'baseline');
      const ratio = (name: string) => ours.find((r) => r.name === name)?.ratio.toFixed(2) ?? '-';
      console.log(
        `\nBeside ours at 64 connections, vs the Express baseline: new keys ${ratio(`${PEER_NAME}, new keys`)}x for` +
          ` the peer (Redis, not in the charge's transaction), ${ratio(REDIS_NEW_KEYS)}x ours on Redis (the same),` +
          ` ${ratio('standard, new keys')}x standard, ${ratio('transactional, new keys')}x transactional` +
          ` (exactly-once); replays ${ratio(`${PEER_NAME}, replays`)}x for the peer, ${ratio(REDIS_REPLAYS)}x ours on` +
          ` Redis (replay cache), ${ratio(REDIS_REPLAYS_UNCACHED)}x ours read from Redis, ${ratio('replays')}x ours` +
          ` (replay cache), ${ratio('replays, from the database')}x ours from the database.`,
      );
    }
    printRedisRatios(results);
    for (const group of Object.keys(REDIS_GROUPS) as RedisGroup[])
      if (redisSkipped[group]) console.log(`The ${REDIS_GROUPS[group].rows} skipped: ${redisSkipped[group]}`);
    if (pgbouncerSkipped) console.log(`Rows ${PGBOUNCER} skipped: ${pgbouncerSkipped}`);
    if (consumersSkipped) console.log(`${CONSUMER_NAME} rows skipped: ${consumersSkipped}`);
    const targetChecks = checkTargets(results, redisSkipped);
    console.log(
      `\nThe targets of issue #31 and of the Redis store's rows, measured in this run:\n${formatTargets(targetChecks)}`,
    );
    const folder = fileURLToPath(new URL('./results/', import.meta.url));
    mkdirSync(folder, { recursive: true });
    const run = {
      date: new Date().toISOString(),
      seconds: SECONDS,
      rounds: ROUNDS,
      scaleRecords: SCALE_RECORDS,
      platforms: MEASURED_PLATFORMS,
      stores: MEASURED_STORES,
      peerSkipped: redisSkipped.peer ?? null,
      redisSkipped: redisSkipped.redis ?? null,
      pgbouncerSkipped: pgbouncerSkipped ?? null,
      consumersSkipped: consumersSkipped ?? null,
      consumerMessages: CONSUMER_MESSAGES,
      results,
      targets: targetChecks,
    };
    writeFileSync(join(folder, 'latest.json'), `${JSON.stringify(run, null, 2)}\n`);
    writeFileSync(join(folder, 'latest.svg'), renderChart(results));
    console.log(`\nWrote ${join(folder, 'latest.json')} and ${join(folder, 'latest.svg')}`);
  } finally {
    await Promise.all(Object.values(apps).map((app) => app.close()));
    if (startedOnRedis)
      await deleteRedisKeys(redisPrefix).then(
        (deleted) => console.log(`Deleted the run's ${deleted} keys in Redis (${redisPrefix}*)`),
        (error: unknown) => console.log(`The run's keys in Redis (${redisPrefix}*) not deleted: ${String(error)}`),
      );
    await queue?.delete();
    await Promise.all(Object.values(databases).map((db) => db?.drop()));
    await embedded?.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
