import { setTimeout as delay } from 'node:timers/promises';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { idempotencyMigrations } from '../../src/postgres/index.js';
import { describeThroughPgBouncer, throughPgBouncer } from '../support/pgbouncer.js';
import { redisCluster } from '../support/redis.js';
import { useRedisCluster } from '../support/redis-cluster.js';
import { describeWith } from '../support/required-service.js';
import { ROLLING_WORK_LOG, RollingFleet, type WorkAnswer } from '../support/rolling-fleet.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';

/**
 * A rolling deploy of a fleet on one store: 8 instances of test/support/rolling-app.ts (`inFlight: 'wait'`, shutdown
 * hooks enabled), each in turn stopped with SIGTERM while its replacement starts, under a steady stream of new keys
 * and, every half second, a key sent to every instance at once. Clients act as behind a load balancer that has not
 * seen an instance go: a request refused or reset before its answer goes to another instance, a 503 comes back after
 * its Retry-After, with the same key. Each key runs once, every request is answered 201 (the same body for a key)
 * or 503 with Retry-After, and each key is answered 201 in the end; through PgBouncer, the instances' pools share
 * no more server connections than its pool has.
 */
const INSTANCES = 8;
/** About 20 new keys a second, each sent once (and again after a 503 or a transport error). */
const NEW_KEY_EVERY_MS = 50;
const HOT_KEY_EVERY_MS = 500;
/** Answers of 503 one request takes before the test stops retrying it (and fails). */
const TRIES_AFTER_503 = 8;
/** The `application_name` of the instances' sessions through PgBouncer, passed on to its server connections. */
const POOLED_APPLICATION = 'rolling_app_pooled';
/** PgBouncer's `default_pool_size`, as `scripts/start-pgbouncer.sh` sets it: its server connections per database. */
const PGBOUNCER_POOL_SIZE = Number(process.env.PGBOUNCER_POOL_SIZE ?? 4);

/** What the requests of a key got, each request's answers in order (those after a 503 included). */
interface KeyLoad {
  key: string;
  requests: WorkAnswer[][];
  /** Why a request of the key ended without an answer of 201, if one did. */
  failures: string[];
}

/** The load a roll runs under, and what it got. */
class Load {
  readonly keys = new Map<string, KeyLoad>();
  retriesAfter503 = 0;
  private readonly requests: Array<Promise<void>> = [];

  constructor(private readonly fleet: RollingFleet) {}

  /** Sends `key` to every instance that listens now, at once. */
  sendToAll(key: string): void {
    for (const instance of this.fleet.instances) this.requests.push(this.request(key, instance));
  }

  send(key: string): void {
    this.requests.push(this.request(key));
  }

  /** Resolves once every request has its final answer (or has failed). */
  async settled(): Promise<void> {
    await Promise.all(this.requests);
  }

  answers(): WorkAnswer[] {
    return [...this.keys.values()].flatMap((load) => load.requests.flat());
  }

  /** The answers of 503. */
  refusals(): WorkAnswer[] {
    return this.answers().filter(({ status }) => status === 503);
  }

  /** A request, sent again after each 503 (its Retry-After later, to the next instance in turn). */
  private async request(key: string, to?: Parameters<RollingFleet['post']>[1]): Promise<void> {
    const load = this.keys.get(key) ?? { key, requests: [], failures: [] };
    this.keys.set(key, load);
    const answers: WorkAnswer[] = [];
    load.requests.push(answers);
    try {
      for (let tries = 1; ; tries += 1) {
        const answer = await this.fleet.post(key, tries === 1 ? to : undefined);
        answers.push(answer);
        if (answer.status !== 503) return;
        if (tries === TRIES_AFTER_503) throw new Error(`answered 503 ${tries} times`);
        this.retriesAfter503 += 1;
        await delay(Number(answer.retryAfter ?? 1) * 1_000);
      }
    } catch (error) {
      load.failures.push((error as Error).message);
    }
  }
}

/** Rolls the fleet under the load, and waits until every request has its final answer; `sample` runs every 200 ms. */
async function rollUnderLoad(fleet: RollingFleet, sample?: () => Promise<void>): Promise<Load> {
  const load = new Load(fleet);
  let rolling = true;
  let rollFailure: Error | undefined;
  let hotKeys = 0;
  const sendHotKey = () => load.sendToAll(`hot-${(hotKeys += 1)}`);
  // A key sent to every instance as one gets SIGTERM, too: the one that stops gets it as its drain begins.
  const rolled = fleet.roll({ onStopping: sendHotKey }).then(
    () => void (rolling = false),
    (error: Error) => {
      rolling = false;
      rollFailure = error;
    },
  );
  const sampled = (async () => {
    while (rolling && sample) {
      await sample();
      await delay(200);
    }
  })();
  let hotKeyAt = 0;
  for (let index = 0; rolling; index += 1) {
    load.send(`new-${index}`);
    if (Date.now() >= hotKeyAt) {
      sendHotKey();
      hotKeyAt = Date.now() + HOT_KEY_EVERY_MS;
    }
    await delay(NEW_KEY_EVERY_MS);
  }
  await Promise.all([rolled, sampled, load.settled()]);
  if (rollFailure !== undefined) throw rollFailure;
  return load;
}

/** What every roll must show, whatever the store. */
async function expectEachKeyRunOnceAndAnswered(db: TestDatabase, fleet: RollingFleet, load: Load): Promise<void> {
  const keys = [...load.keys.values()];
  expect(keys.filter(({ failures }) => failures.length > 0)).toEqual([]);
  // 201, or 503 with Retry-After (the instance is draining): never another 5xx, nor a 409 (the wait is 5 s; a
  // handler, 100 ms).
  const unexpected = load
    .answers()
    .filter(({ status, retryAfter }) => status !== 201 && !(status === 503 && retryAfter !== undefined));
  expect(unexpected).toEqual([]);
  // Each request ended with a 201, and the 201s of a key are the answer of its one run.
  expect(keys.filter(({ requests }) => requests.some((answers) => answers.at(-1)?.status !== 201))).toEqual([]);
  const bodies = new Map(
    keys.map(({ key, requests }) => [key, new Set(requests.flat().flatMap((a) => (a.status === 201 ? a.body : [])))]),
  );
  expect([...bodies].filter(([, answers]) => answers.size !== 1)).toEqual([]);

  const runs = await db.query<{ key: string; runs: number; pid: number }>(
    'SELECT key, count(*)::int AS runs, min(pid) AS pid FROM work_log GROUP BY key',
  );
  expect(runs.filter((run) => run.runs !== 1)).toEqual([]);
  expect(runs.map(({ key }) => key).sort()).toEqual(keys.map(({ key }) => key).sort());
  const answered = runs.filter(({ key, pid }) => bodies.get(key)?.has(JSON.stringify({ key, pid })));
  expect(answered).toHaveLength(runs.length);

  // Requests met the instances on their way out: answered 503 (draining), or refused or reset (closed).
  expect(load.refusals().length + fleet.counts.refused + fleet.counts.reset).toBeGreaterThan(0);

  // Every instance was replaced, and went through its shutdown hooks (which end it with the signal), logging no error.
  expect(fleet.started).toHaveLength(2 * INSTANCES);
  const rolled = fleet.started.slice(0, INSTANCES);
  expect(rolled.map((instance) => instance.exit)).toEqual(rolled.map(() => ({ code: null, signal: 'SIGTERM' })));
  expect(fleet.started.filter((instance) => /\bERROR\b/.test(instance.output()))).toEqual([]);
}

/** One line of what a roll took: its requests, the refusals (by code) and retries, its duration. */
function summary(store: string, load: Load, fleet: RollingFleet, durationMs: number): string {
  const codes = new Map<string, number>();
  for (const { body } of load.refusals()) {
    const { error } = JSON.parse(body) as { error: string };
    codes.set(error, (codes.get(error) ?? 0) + 1);
  }
  const { requests, refused, reset } = fleet.counts;
  return (
    `rolling deploy on ${store}: ${load.keys.size} keys, ${requests} requests, ` +
    `${load.answers().filter(({ replay }) => replay).length} replays, ${load.refusals().length} answered ` +
    `503 (${[...codes].map(([code, n]) => `${code} ${n}`).join(', ') || 'none'}), ${load.retriesAfter503} sent ` +
    `again after it, ${refused} refused and ${reset} reset (sent to another instance), ` +
    `${(durationMs / 1_000).toFixed(1)} s`
  );
}

/** The records' table and work_log, on `db`: migrated once here, before the instances (which migrate nothing) start. */
async function migrate(db: TestDatabase): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: idempotencyMigrations() });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
  } finally {
    await dataSource.destroy();
  }
}

/**
 * PgBouncer's server connections to `db`, as PostgreSQL lists them: the sessions of the instances' application_name,
 * which PgBouncer passes on. (Its admin console would say the same, but refuses the tests' user:
 * `scripts/start-pgbouncer.sh` sets no `admin_users` nor `stats_users`.) `sample()` counts them, on a session of its
 * own straight to the server.
 */
async function serverConnections(db: TestDatabase) {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const samples: number[] = [];
  return {
    samples,
    sample: async () => {
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
        [POOLED_APPLICATION],
      );
      samples.push(rows[0].n);
    },
    end: () => client.end(),
  };
}

describeThroughPgBouncer(
  'a fleet of 8 instances on PostgreSQL through PgBouncer, rolled one at a time under load',
  () => {
    const db = useTestDatabase(ROLLING_WORK_LOG);
    let fleet: RollingFleet | undefined;

    beforeAll(async () => {
      await migrate(db);
      const pooled = new URL(throughPgBouncer(db.url));
      pooled.searchParams.set('application_name', POOLED_APPLICATION);
      // Pools of 4 and the store's batches: 8 instances' clients, several times PgBouncer's server connections.
      fleet = await RollingFleet.start({
        size: INSTANCES,
        env: { STORE: 'postgres', DATABASE_URL: pooled.toString(), POOL_MAX: '4' },
      });
    }, 90_000);

    afterAll(async () => {
      await fleet?.stop();
    });

    it("runs each key once, answers every request, and stays within PgBouncer's server connections", async () => {
      const started = Date.now();
      const servers = await serverConnections(db);
      let load: Load;
      try {
        load = await rollUnderLoad(fleet as RollingFleet, servers.sample);
      } finally {
        await servers.end();
      }
      await expectEachKeyRunOnceAndAnswered(db, fleet as RollingFleet, load);
      expect(Math.max(...servers.samples)).toBeGreaterThan(0);
      expect(Math.max(...servers.samples)).toBeLessThanOrEqual(PGBOUNCER_POOL_SIZE);
      const bound = `server connections at most ${Math.max(...servers.samples)} of ${PGBOUNCER_POOL_SIZE}`;
      console.info(
        `${summary('PostgreSQL through PgBouncer', load, fleet as RollingFleet, Date.now() - started)}, ${bound}`,
      );
    }, 120_000);
  },
);

describeWith(redisCluster, 'a fleet of 8 instances on Redis Cluster, rolled one at a time under load', () => {
  const db = useTestDatabase(ROLLING_WORK_LOG);
  const cluster = useRedisCluster();
  let fleet: RollingFleet | undefined;

  beforeAll(async () => {
    const nodes = cluster.startupNodes.map(({ host, port }) => `${host}:${port}`);
    // The runs' log stays on PostgreSQL (straight to it), where the test counts them.
    fleet = await RollingFleet.start({
      size: INSTANCES,
      env: { STORE: 'redis-cluster', REDIS_CLUSTER_NODES: nodes.join(','), DATABASE_URL: db.url, POOL_MAX: '4' },
    });
  }, 90_000);

  afterAll(async () => {
    await fleet?.stop();
  });

  it('runs each key once, and answers every request', async () => {
    const started = Date.now();
    const load = await rollUnderLoad(fleet as RollingFleet);
    await expectEachKeyRunOnceAndAnswered(db, fleet as RollingFleet, load);
    console.info(summary('Redis Cluster', load, fleet as RollingFleet, Date.now() - started));
  }, 120_000);
});
