import { randomUUID } from 'node:crypto';
import { IdempotencyOperator } from '../../src/postgres/index.js';
import { scopeLockKey } from '../../src/postgres/holder-locks.js';
import { type HeldLock, holdLock } from '../support/hold-lock.js';
import { startTestContext, type TestContext } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';

/**
 * `stuck()` with a limit, where live transactional attempts are older than the stuck records: the limit counts the
 * stuck records it returns, not the rows it reads before it leaves out the live ones.
 */
describe('IdempotencyOperator.stuck() behind older live transactional attempts', () => {
  const db = useTestDatabase();
  const held: HeldLock[] = [];
  let context: TestContext | undefined;
  // The module's start runs the records table's migrations.
  beforeAll(async () => (context = await startTestContext({ database: db, idempotency: { singleTenant: true } })));
  afterAll(() => context?.close());

  /** An in-progress record, `age` old, its lease until `leaseUntil` (SQL), held by a live holder transaction or not. */
  async function inProgress(key: string, age: string, leaseUntil: string, liveHolder: boolean): Promise<void> {
    await db.query(
      `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, attempts,
         created_at, locked_until, expires_at, lock_held)
       VALUES ('', 'POST /payouts', $1, 'fp', 'in_progress', $2, 1, now() - $3::interval, ${leaseUntil},
         now() + interval '1 day', $4)`,
      [key, randomUUID(), age, liveHolder],
    );
    if (!liveHolder) return;
    const [{ oid }] = await db.query<{ oid: string }>("SELECT to_regclass('idempotency_records')::oid::text AS oid");
    const lockKey = scopeLockKey(oid, { account: '', endpoint: 'POST /payouts', key });
    held.push(await holdLock(db.url, 'SELECT pg_advisory_xact_lock($1::bigint)', [lockKey]));
  }

  it('finds the stuck record within its limit', async () => {
    try {
      await inProgress('live-1', '2 hours', "now() + interval '1 hour'", true);
      await inProgress('live-2', '90 minutes', "now() + interval '1 hour'", true);
      await inProgress('lapsed', '1 minute', "now() - interval '10 seconds'", false);
      const operator = new IdempotencyOperator((text, values) => db.query(text, values));
      expect((await operator.stuck()).map((record) => record.key)).toEqual(['lapsed']);
      expect((await operator.stuck({ limit: 1 })).map((record) => record.key)).toEqual(['lapsed']);
      expect((await operator.list('running')).map((record) => record.key).sort()).toEqual(['live-1', 'live-2']);
    } finally {
      for (const lock of held) await lock.letGo();
    }
  });
});
