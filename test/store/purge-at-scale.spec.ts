import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { DataSource } from 'typeorm';
import { idempotencyMigrations, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

const EXPIRED = 1_000_000;
const LIVE = 1_000;
const BATCH = 10_000;

let db: TestDatabase;
let dataSource: DataSource;
let store: PostgresIdempotencyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  dataSource = new DataSource({
    type: 'postgres',
    url: db.url,
    migrations: idempotencyMigrations(),
    extra: { max: 4 },
  });
  await dataSource.initialize();
  await dataSource.runMigrations();
  store = new PostgresIdempotencyStore(dataSource, 'idempotency_records');
  // One statement, not a million: expired records, and live ones that must survive.
  await db.query(
    `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, completed_at,
                                      expires_at, response_status, response_headers, response_body)
     SELECT 'acct_' || (i % 100), 'POST /v1/charges', 'key-' || i, md5(i::text), 'completed', gen_random_uuid(),
            now() - interval '2 days', now() - interval '2 days',
            CASE WHEN i <= $1 THEN now() - interval '1 day' ELSE now() + interval '1 day' END,
            201, '{"content-type": "application/json"}', convert_to('{"id":"ch_' || i || '"}', 'UTF8')
     FROM generate_series(1, $2::int) AS i`,
    [EXPIRED, EXPIRED + LIVE],
  );
  await db.query('ANALYZE idempotency_records');
}, 300_000);

afterAll(async () => {
  await store?.close();
  await dataSource?.destroy();
  await db?.drop();
});

describe(`purging ${EXPIRED.toLocaleString('en')} expired records`, () => {
  it('deletes them in bounded batches while claims keep flowing', async () => {
    let purging = true;
    const claimLatencies: number[] = [];
    const claims = (async () => {
      while (purging) {
        const started = performance.now();
        const result = await store.claim(
          { account: 'acct_live', endpoint: 'POST /v1/charges', key: randomUUID() },
          'fp',
          randomUUID(),
          { leaseSeconds: 60, ttlSeconds: 3600 },
        );
        expect(result).toEqual({ claimed: true, takeover: false });
        claimLatencies.push(performance.now() - started);
      }
    })();

    const batchDurations: number[] = [];
    let purged = 0;
    try {
      for (;;) {
        const started = performance.now();
        const deleted = await store.purgeExpired(BATCH);
        batchDurations.push(performance.now() - started);
        purged += deleted;
        if (deleted < BATCH) break;
      }
    } finally {
      purging = false;
      await claims;
    }

    expect(purged).toBe(EXPIRED);
    await expect(
      db.query('SELECT count(*)::int AS n FROM idempotency_records WHERE expires_at <= now()'),
    ).resolves.toEqual([{ n: 0 }]);
    await expect(
      db.query(`SELECT count(*)::int AS n FROM idempotency_records WHERE account <> 'acct_live'`),
    ).resolves.toEqual([{ n: LIVE }]);
    // Claims ran between the batches, not after them.
    expect(claimLatencies.length).toBeGreaterThan(batchDurations.length / 2);

    const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
    const percentile = (values: number[], p: number) =>
      sorted(values)[Math.min(values.length - 1, Math.floor(values.length * p))];
    console.info(
      [
        `purge: ${purged} expired records in ${batchDurations.length} batches of ${BATCH}`,
        `batch ms: median ${percentile(batchDurations, 0.5).toFixed(1)}, p99 ${percentile(batchDurations, 0.99).toFixed(1)}, ` +
          `max ${Math.max(...batchDurations).toFixed(1)}, total ${batchDurations.reduce((a, b) => a + b, 0).toFixed(0)}`,
        `claims during the purge: ${claimLatencies.length}, ms median ${percentile(claimLatencies, 0.5).toFixed(2)}, ` +
          `p99 ${percentile(claimLatencies, 0.99).toFixed(2)}, max ${Math.max(...claimLatencies).toFixed(2)}`,
      ].join('\n'),
    );
  });
});
