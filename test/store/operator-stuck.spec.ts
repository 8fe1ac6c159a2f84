import { randomUUID } from 'node:crypto';
import { IdempotencyOperator } from '../../src/postgres/index.js';
import type { IdempotencyStore } from '../../src/protocol/idempotency-store.interface.js';
import { IDEMPOTENCY_STORE } from '../../src/protocol/idempotency.tokens.js';
import { scopeLockKey } from '../../src/postgres/holder-locks.js';
import { type HeldLock, holdLock } from '../support/hold-lock.js';
import { startTestContext, type TestContext } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { operatorStepsCases } from '../support/operator-steps-cases.js';

/**
 * Which records in progress `stuck()` lists and how `inspect()` shows them: a live attempt (within its lease, or
 * holding its scope's lock) is never offered for a release, which would let a retry run the handler a second time.
 * The steps a record holds, by name, and the operator's release of one the store released with its steps (kept for
 * its request to resume): deleted, steps and all, fenced on the token the operator was shown.
 */
describe("IdempotencyOperator's view of attempts in progress", () => {
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

  const operator = () => new IdempotencyOperator((text, values) => db.query(text, values));

  it('shows a live standard-mode attempt (no holder transaction, within its lease) as running, not stuck', async () => {
    const store = context!.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE);
    const scope = { account: '', endpoint: 'POST /refunds', key: `standard-${randomUUID()}` };
    const claim = { scope, attempt: randomUUID() };
    await expect(store.claim(scope, 'fp', claim.attempt, { leaseSeconds: 60, ttlSeconds: 600 })).resolves.toEqual({
      claimed: true,
      takeover: false,
    });
    try {
      expect(await operator().inspect(scope)).toMatchObject({ state: 'running', holderTransaction: false });
      expect((await operator().stuck()).map((record) => record.key)).not.toContain(scope.key);
    } finally {
      await store.release(claim);
    }
  });

  it("wakes the attempts waiting for the record it releases, on the store's channel, well before their wait ends", async () => {
    const store = context!.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE);
    const scope = { account: '', endpoint: 'POST /refunds', key: `released-${randomUUID()}` };
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, { leaseSeconds: 60, ttlSeconds: 600 });
    expect(await store.markAwaited(scope)).toBe(true);
    const wait = store.waitForChange(scope, 60_000);
    let bound: NodeJS.Timeout | undefined;
    try {
      await wait.listening;
      expect(await operator().release(scope, attempt)).toEqual({ outcome: 'released' });
      const woken = await Promise.race([
        wait.changed.then(() => 'woken'),
        new Promise((resolve) => (bound = setTimeout(resolve, 10_000, 'still waiting after 10 s'))),
      ]);
      expect(woken).toBe('woken');
    } finally {
      clearTimeout(bound);
      wait.cancel();
    }
  });

  it('finds the stuck record within its limit, behind older live transactional attempts', async () => {
    try {
      await inProgress('live-1', '2 hours', "now() + interval '1 hour'", true);
      await inProgress('live-2', '90 minutes', "now() + interval '1 hour'", true);
      await inProgress('lapsed', '1 minute', "now() - interval '10 seconds'", false);
      expect((await operator().stuck()).map((record) => record.key)).toEqual(['lapsed']);
      expect((await operator().stuck({ limit: 1 })).map((record) => record.key)).toEqual(['lapsed']);
      expect((await operator().list('running')).map((record) => record.key).sort()).toEqual(['live-1', 'live-2']);
    } finally {
      for (const lock of held) await lock.letGo();
    }
  });

  operatorStepsCases(() => ({
    store: context!.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE),
    operator: operator(),
    newScope: () => ({ account: '', endpoint: 'POST /refunds', key: `steps-${randomUUID()}` }),
  }));
});
