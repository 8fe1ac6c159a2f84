import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { type HeldLock, holdLock, waitingForLock } from '../support/hold-lock.js';
import { PLATFORMS, postCharge, type RunningApp, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * A process of the sample app is SIGKILLed at each step of a charge; then a retry goes to another instance: in
 * standard mode after the lease lapses (1 s here), in transactional mode at once, its 30 s lease notwithstanding (the
 * dead process's transaction held the scope's lock; its session ended with it). The steps are reached by holding
 * database locks the step waits for.
 */
type Mode = 'standard' | 'transactional';
type Step = 'after the claim' | 'after the provider charged' | 'during the finalize' | 'after the commit';

/** The doomed process's lease: what a standard-mode retry waits out, and what a transactional one need not. */
const LEASE_SECONDS: Record<Mode, number> = { standard: 1, transactional: 30 };
/** From the SIGKILL to the transactional retry that runs: far below its lease, with room for a loaded machine. */
const TRANSACTIONAL_RETRY_BOUND_MS = 5_000;

interface Held {
  charges: number;
  providerCharges: number;
  record: 'in_progress' | 'completed';
}

interface Expected {
  /** What the database holds once the process is dead. */
  held: Held;
  /** What the retry gets, and what the database holds after it. */
  retry: 'runs' | 'replays';
  after: { charges: number; providerCharges: number };
}

const scenarios: Array<[Mode, Step, Expected]> = [
  [
    'standard',
    'after the claim',
    {
      held: { charges: 0, providerCharges: 0, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  [
    'transactional',
    'after the claim',
    {
      held: { charges: 0, providerCharges: 0, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  // The provider's ledger dedupes the repeated call by the derived key: one provider charge either way.
  [
    'standard',
    'after the provider charged',
    {
      held: { charges: 0, providerCharges: 1, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  [
    'transactional',
    'after the provider charged',
    {
      held: { charges: 0, providerCharges: 1, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  // Standard mode's window: the charge row committed, the outcome did not; the retry writes a second row.
  [
    'standard',
    'during the finalize',
    {
      held: { charges: 1, providerCharges: 1, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 2, providerCharges: 1 },
    },
  ],
  // Transactional mode closes it: the charge row and the outcome commit together, or neither does.
  [
    'transactional',
    'during the finalize',
    {
      held: { charges: 0, providerCharges: 1, record: 'in_progress' },
      retry: 'runs',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  [
    'standard',
    'after the commit',
    {
      held: { charges: 1, providerCharges: 1, record: 'completed' },
      retry: 'replays',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
  [
    'transactional',
    'after the commit',
    {
      held: { charges: 1, providerCharges: 1, record: 'completed' },
      retry: 'replays',
      after: { charges: 1, providerCharges: 1 },
    },
  ],
];

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

async function heldFor(account: string, key: string): Promise<Held> {
  const [row] = await db.query<Held>(
    `SELECT (SELECT count(*)::int FROM charges WHERE account = $1) AS charges,
            (SELECT count(*)::int FROM provider_charges WHERE account = $1) AS "providerCharges",
            (SELECT status FROM idempotency_records WHERE account = $1 AND idempotency_key = $2) AS record`,
    [account, key],
  );
  return row;
}

describe.each(PLATFORMS)('a process SIGKILLed at each step of a charge, on %s', (platform) => {
  const survivors = new Map<Mode, RunningApp>();

  beforeAll(async () => {
    for (const mode of ['standard', 'transactional'] as const) {
      survivors.set(
        mode,
        await startSampleApp({
          databaseUrl: db.url,
          leaseSeconds: 1,
          transactional: mode === 'transactional',
          platform,
        }),
      );
    }
  });

  afterAll(async () => {
    for (const survivor of survivors.values()) await survivor.close();
  });

  it.each(scenarios)('%s mode, %s', async (mode, step, expected) => {
    const account = `sk_test_crash_${platform}_${mode}_${step.replace(/ /g, '_')}`;
    const key = randomUUID();
    const charge = { amount: 700, currency: 'eur' };
    const application = `doomed_${randomUUID().slice(0, 8)}`;
    const doomedUrl = new URL(db.url);
    doomedUrl.searchParams.set('application_name', application);
    const doomed = await spawnSampleApp({
      DATABASE_URL: doomedUrl.toString(),
      IDEMPOTENCY_LEASE_SECONDS: String(LEASE_SECONDS[mode]),
      IDEMPOTENCY_TRANSACTIONAL: String(mode === 'transactional'),
      SAMPLE_PLATFORM: platform,
      // After the claim, the provider call takes far longer than the test: the process dies inside it.
      PROVIDER_DELAY_MS: step === 'after the claim' ? '600000' : '0',
    });
    const locks: HeldLock[] = [];
    try {
      if (step === 'after the provider charged' || step === 'during the finalize') {
        locks.push(await holdLock(db.url, 'LOCK TABLE charges IN EXCLUSIVE MODE'));
      }
      const lost = postCharge(doomed.url, charge, key, account).then(
        () => 'answered',
        () => 'connection lost',
      );
      const recordExists = async () =>
        (
          await db.query('SELECT status FROM idempotency_records WHERE account = $1 AND idempotency_key = $2', [
            account,
            key,
          ])
        )[0];
      await waitFor(recordExists, 'the claim');
      if (step === 'after the provider charged') {
        await waitFor(waitingForLock(db, 'INSERT INTO "charges"%'), 'the charge insert to wait');
      }
      if (step === 'during the finalize') {
        await waitFor(waitingForLock(db, 'INSERT INTO "charges"%'), 'the charge insert to wait');
        locks.push(
          await holdLock(
            db.url,
            'SELECT 1 FROM idempotency_records WHERE account = $1 AND idempotency_key = $2 FOR UPDATE',
            [account, key],
          ),
        );
        await locks.shift()?.letGo();
        // The outcome's UPDATE, not a lease renewal (which waits on the same row lock every third of the lease).
        await waitFor(waitingForLock(db, "WITH changed AS (%SET status = 'completed'%"), 'the finalize to wait');
      }
      if (step === 'after the commit') {
        await waitFor(async () => ((await recordExists())?.status === 'completed' ? true : undefined), 'the commit');
      }

      const exited = once(doomed.child, 'exit');
      const killedAt = Date.now();
      doomed.child.kill('SIGKILL');
      await exited;
      // Its sessions die with it, rolling back whatever it had not committed; but a session waiting for a lock (the
      // test's) does not watch its client's socket until the wait ends, so those are ended here.
      if (locks.length > 0) {
        await db.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
          application,
        ]);
      }
      for (const lock of locks.splice(0)) await lock.letGo();
      // After the commit the answer may have gone out before the kill; before it, it cannot have.
      const answer = await lost;
      if (step !== 'after the commit') expect(answer).toBe('connection lost');
      await expect(heldFor(account, key)).resolves.toEqual(expected.held);

      const survivor = survivors.get(mode) as RunningApp;
      const retry = await waitFor(
        async () => {
          const response = await postCharge(survivor.url, charge, key, account);
          return response.status === 409 ? undefined : response;
        },
        mode === 'transactional' ? 'the dead holder to be seen' : 'the lease to lapse',
        mode === 'transactional' ? 2 * TRANSACTIONAL_RETRY_BOUND_MS : undefined,
      );
      const killToRetry = Date.now() - killedAt;
      expect(retry.status).toBe(201);
      if (mode === 'transactional') expect(killToRetry).toBeLessThan(TRANSACTIONAL_RETRY_BOUND_MS);
      expect(retry.headers['idempotent-replay']).toBe(expected.retry === 'replays' ? 'true' : undefined);
      const after = await heldFor(account, key);
      expect(after).toEqual({ ...expected.after, record: 'completed' });
      const ids = await db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [account]);
      expect(ids.map((row) => row.id)).toContain(retry.body.id);
    } finally {
      for (const lock of locks) await lock.letGo();
      await doomed.close();
    }
  });
});
