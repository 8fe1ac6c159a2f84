import { randomUUID } from 'node:crypto';
import { SAMPLE_MIGRATIONS } from '../../sample-app/app.module.js';
import { describeThroughPgBouncer, throughPgBouncer } from '../support/pgbouncer.js';
import { chargeBurst, type SpawnedApp, spawnSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

/**
 * The sample app as `npm start` runs it with DATABASE_URL through PgBouncer 1.18 in transaction mode (PGBOUNCER_URL):
 * two instances started at once on a fresh database, which they migrate over DATABASE_DIRECT_URL, then serving a
 * burst of charges on distinct keys and on one key; and the starts refused, naming the setting to give.
 */

/** The `application_name` of the app's sessions through PgBouncer, which passes it on to its server connections. */
const POOLED_APPLICATION = 'sample_app_pooled';
/** PgBouncer's `default_pool_size`, as `scripts/start-pgbouncer.sh` sets it. */
const PGBOUNCER_POOL_SIZE = Number(process.env.PGBOUNCER_POOL_SIZE ?? 4);

let db: TestDatabase | undefined;

afterAll(async () => {
  await db?.drop();
});

/** The environment of an instance on a fresh database: DATABASE_URL through PgBouncer, and `extra` settings. */
function pooledEnv(database: TestDatabase, extra: Record<string, string>): Record<string, string> {
  const pooled = new URL(throughPgBouncer(database.url));
  pooled.searchParams.set('application_name', POOLED_APPLICATION);
  return { DATABASE_URL: pooled.toString(), ...extra };
}

describeThroughPgBouncer('the sample app behind PgBouncer in transaction mode', () => {
  let instances: SpawnedApp[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    const env = pooledEnv(db, {
      DATABASE_TRANSACTION_POOLER: 'true',
      DATABASE_DIRECT_URL: db.url,
      IDEMPOTENCY_IN_FLIGHT: 'wait',
      // Long enough for the burst's duplicates to arrive while the first attempt runs.
      PROVIDER_DELAY_MS: '100',
      DATABASE_POOL_SIZE: '10',
    });
    // At once, on a database not migrated yet: their migrations must take turns.
    instances = await Promise.all([spawnSampleApp(env), spawnSampleApp(env)]);
  });

  afterAll(async () => {
    await Promise.all(instances.map((instance) => instance.close()));
  });

  afterEach(() => {
    for (const instance of instances) expect(instance.output()).not.toMatch(/\bERROR\b/);
  });

  it('starts two instances at once on a fresh database, which is migrated once, its lock let go', async () => {
    const database = db as TestDatabase;
    const [applied] = await database.query<{ runs: number; migrations: number }>(
      'SELECT count(*)::int AS runs, count(DISTINCT name)::int AS migrations FROM migrations',
    );
    expect(applied).toEqual({ runs: SAMPLE_MIGRATIONS.length, migrations: SAMPLE_MIGRATIONS.length });
    const advisoryLocks = await database.query(
      `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    expect(advisoryLocks).toEqual([]);
  });

  it('charges 32 distinct keys and 16 attempts with one key at once: each key once, every answer 201', async () => {
    const apiKey = 'sk_test_pooler_burst';
    const distinctKeys = Array.from({ length: 32 }, () => randomUUID());
    const sharedKey = randomUUID();
    const keys = [...distinctKeys, ...Array.from({ length: 16 }, () => sharedKey)];
    const results = await chargeBurst(
      instances.map((instance) => instance.url),
      keys,
      apiKey,
      { amount: 700, currency: 'eur' },
    );

    expect(results.map((result) => result.status)).toEqual(keys.map(() => 201));
    const distinct = results.slice(0, distinctKeys.length);
    const shared = results.slice(distinctKeys.length);
    expect(distinct.every((result) => result.replay === null)).toBe(true);
    // One attempt ran; the others waited for its outcome and got it replayed.
    expect(shared.filter((result) => result.replay === null)).toHaveLength(1);
    expect(new Set(shared.map((result) => result.body.id))).toEqual(new Set([shared[0].body.id]));

    const database = db as TestDatabase;
    const charges = await database.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [apiKey]);
    expect(charges.map((charge) => charge.id).sort()).toEqual(
      [...distinct.map((result) => result.body.id), shared[0].body.id].sort(),
    );
    const providerCharges = await database.query('SELECT id FROM provider_charges WHERE account = $1', [apiKey]);
    expect(providerCharges).toHaveLength(distinctKeys.length + 1);
  });

  it("keeps the app's sessions on PgBouncer's few server connections", async () => {
    const [{ servers }] = await (db as TestDatabase).query<{ servers: number }>(
      `SELECT count(*)::int AS servers FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = $1`,
      [POOLED_APPLICATION],
    );
    // Two instances' pools of 10, all busy during the burst, on at most these.
    expect(servers).toBeGreaterThan(0);
    expect(servers).toBeLessThanOrEqual(PGBOUNCER_POOL_SIZE);
  });
});

describeThroughPgBouncer('the sample app refusing to start behind PgBouncer', () => {
  /** Starts an instance on a fresh database with `extra` settings; answers why it did not start, and its tables. */
  async function refusedStart(extra: Record<string, string>): Promise<{ reason: string; tables: string[] }> {
    const database = await createTestDatabase();
    try {
      const reason = await spawnSampleApp(pooledEnv(database, extra)).then(
        async (started) => {
          await started.close();
          throw new Error('the app started');
        },
        (error: Error) => error.message,
      );
      const tables = await database.query<{ tablename: string }>(
        `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`,
      );
      return { reason, tables: tables.map((table) => table.tablename) };
    } finally {
      await database.drop();
    }
  }

  it('without DATABASE_TRANSACTION_POOLER=true, naming it and DATABASE_DIRECT_URL', async () => {
    const { reason } = await refusedStart({});
    expect(reason).toMatch(/exited with 1 before listening/);
    expect(reason).toMatch(/DATABASE_TRANSACTION_POOLER=true and DATABASE_DIRECT_URL/);
  });

  it('with DATABASE_TRANSACTION_POOLER=true but no DATABASE_DIRECT_URL, naming it, before any migration', async () => {
    const { reason, tables } = await refusedStart({ DATABASE_TRANSACTION_POOLER: 'true' });
    expect(reason).toMatch(/DATABASE_TRANSACTION_POOLER=true needs DATABASE_DIRECT_URL/);
    expect(tables).toEqual([]);
  });
});
