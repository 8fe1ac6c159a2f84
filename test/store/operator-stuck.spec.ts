import { randomUUID } from 'node:crypto';
import { IdempotencyOperator } from '../../src/postgres/index.js';
import type { IdempotencyScope, IdempotencyStore } from '../../src/protocol/idempotency-store.interface.js';
import { IDEMPOTENCY_STORE } from '../../src/protocol/idempotency.tokens.js';
import { scopeLockKey } from '../../src/postgres/holder-locks.js';
import { type HeldLock, holdLock } from '../support/hold-lock.js';
import { startTestContext, type TestContext } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';

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

  const store = () => context!.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE);
  const LONG = { leaseSeconds: 60, ttlSeconds: 600 };

  /** A record of a new scope claimed with fingerprint `fp`, its steps recorded in order; its scope and attempt. */
  async function withSteps(names: string[]): Promise<{ scope: IdempotencyScope; attempt: string }> {
    const scope = { account: '', endpoint: 'POST /refunds', key: `steps-${randomUUID()}` };
    const attempt = randomUUID();
    expect(await store().claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
    for (const name of names) {
      expect(await store().recordStep!({ scope, attempt }, { name, result: JSON.stringify({ secret: name }) })).toBe(
        true,
      );
    }
    return { scope, attempt };
  }

  it("shows the names of a record's steps in order, never their results; none as []", async () => {
    const { scope, attempt } = await withSteps(['create-charge', 'charge-card', 'send-receipt']);
    try {
      const record = await operator().inspect(scope);
      expect(record).toMatchObject({ state: 'running', steps: ['create-charge', 'charge-card', 'send-receipt'] });
      expect(JSON.stringify(record)).not.toContain('secret');
      expect((await operator().find({ key: scope.key }))[0].steps).toEqual(record!.steps);
      expect((await operator().list('running')).find(({ key }) => key === scope.key)?.steps).toEqual(record!.steps);
      const bare = await withSteps([]);
      expect(await operator().inspect(bare.scope)).toMatchObject({ steps: [] });
      await store().release(bare);
    } finally {
      await store().release({ scope, attempt });
    }
  });

  it('discards a record the store released with its steps, fenced on the token shown: the next claim is a new one', async () => {
    const { scope, attempt } = await withSteps(['create-charge', 'charge-card']);
    // The store's release keeps it, for the same request to resume: no attempt holds it, its lease ended.
    expect(await store().release({ scope, attempt })).toBe(true);
    const kept = await operator().inspect(scope);
    expect(kept).toMatchObject({
      state: 'lease-lapsed',
      status: 'in_progress',
      steps: ['create-charge', 'charge-card'],
    });
    expect(kept!.attempt).not.toBe(attempt);
    expect((await operator().stuck()).find(({ key }) => key === scope.key)?.steps).toEqual(kept!.steps);
    // Another request of the key is refused while the record stands.
    expect(await store().claim(scope, 'other-fp', randomUUID(), LONG)).toMatchObject({
      claimed: false,
      existing: { status: 'in_progress' },
    });

    for (const wrong of [attempt, randomUUID(), '']) {
      expect(await operator().release(scope, wrong)).toEqual({ outcome: 'other-attempt', record: kept });
    }
    expect(await operator().release(scope, kept!.attempt)).toEqual({ outcome: 'released' });
    expect(await operator().inspect(scope)).toBeUndefined();
    expect(await operator().release(scope, kept!.attempt)).toEqual({ outcome: 'not-found' });
    // Steps and all: another request of the key now claims it anew, with no step to resume from.
    const next = randomUUID();
    expect(await store().claim(scope, 'other-fp', next, LONG)).toEqual({ claimed: true, takeover: false });
    await store().release({ scope, attempt: next });
  });

  it('discards a record with steps held by a live attempt, fenced on it, and never a completed one', async () => {
    const { scope, attempt } = await withSteps(['create-charge']);
    expect(await operator().release(scope, randomUUID())).toMatchObject({ outcome: 'other-attempt' });
    expect(await operator().release(scope, attempt)).toEqual({ outcome: 'released' });
    expect(await store().claim(scope, 'fp', randomUUID(), LONG)).toEqual({ claimed: true, takeover: false });

    const completed = await withSteps(['create-charge']);
    const response = { status: 201, headers: {}, body: Buffer.from('{}') };
    expect(await store().complete(completed, response, 600)).toBe(true);
    expect(await operator().inspect(completed.scope)).toMatchObject({ state: 'completed', steps: ['create-charge'] });
    expect(await operator().release(completed.scope, completed.attempt)).toMatchObject({ outcome: 'completed' });
  });
});
