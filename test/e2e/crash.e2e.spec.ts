import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { CHARGE_STEPS, type ChargeStep } from '../../sample-app/sample-config.js';
import {
  type Platform,
  PLATFORMS,
  postCharge,
  type RunningApp,
  spawnSampleApp,
  startSampleApp,
} from '../support/sample-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The crash matrix: the sample app's charge in steps (charge row -> card -> result -> receipt), its process SIGKILLed
 * inside each step (its work done, its recovery point not recorded) and after each step (recorded), or after its
 * outcome was stored; then the client retries on another instance: in standard mode once the lease lapses (1 s here),
 * in transactional mode at once, its 30 s lease notwithstanding (the dead process's transaction held the scope's
 * lock; its session ended with it). Whatever the point: one charge row, one provider charge, one receipt, and the
 * retry's answer is the final one, replayed after. In standard mode this is the steps' doing (without them, a crash
 * after the charge row committed wrote a second row); in transactional mode the whole charge rolls back and runs
 * again, the external services deduplicating by the steps' keys. Then the same points in standard mode with no retry:
 * the completer of another instance finishes the charge on its own, from its last step.
 */
type Mode = 'standard' | 'transactional';
type Point = `${'in' | 'after'}-step:${ChargeStep}` | 'after the outcome';

/** The doomed process's lease: what a standard-mode retry waits out, and what a transactional one need not. */
const LEASE_SECONDS: Record<Mode, number> = { standard: 1, transactional: 30 };
/** From the SIGKILL to the transactional retry that runs: far below its lease, with room for a loaded machine. */
const TRANSACTIONAL_RETRY_BOUND_MS = 5_000;

/** What the database holds once the process is dead. */
interface Held {
  charges: number;
  succeeded: number;
  providerCharges: number;
  receipts: number;
}

const POINTS: Point[] = CHARGE_STEPS.flatMap((step): Point[] => [`in-step:${step}`, `after-step:${step}`]);

const COMPLETED: Held = { charges: 1, succeeded: 1, providerCharges: 1, receipts: 1 };

/** Standard mode: each step's writes and recovery point are there once it has been recorded, not before. */
function heldInStandardMode(point: Point): Held {
  if (point === 'after the outcome') return COMPLETED;
  const [where, step] = point.split(':') as ['in-step' | 'after-step', ChargeStep];
  const done = CHARGE_STEPS.indexOf(step) + (where === 'after-step' ? 1 : 0); // steps recorded
  // The external services' work is done inside their step, before it is recorded.
  const called = (external: ChargeStep) => CHARGE_STEPS.indexOf(step) >= CHARGE_STEPS.indexOf(external);
  return {
    charges: done >= 1 ? 1 : 0,
    succeeded: done >= 3 ? 1 : 0,
    providerCharges: called('charge-card') ? 1 : 0,
    receipts: called('send-receipt') ? 1 : 0,
  };
}

/** Transactional mode: nothing of the app's commits before the outcome; the external services' work stands. */
function heldInTransactionalMode(point: Point): Held {
  if (point === 'after the outcome') return COMPLETED;
  return { ...heldInStandardMode(point), charges: 0, succeeded: 0 };
}

/** Transactional mode's cases: one inside and one after each external call, and the last point before the outcome. */
const TRANSACTIONAL_POINTS: Point[] = ['in-step:charge-card', 'after-step:record-result', 'in-step:send-receipt'];

const db = useTestDatabase();

async function heldFor(account: string): Promise<Held> {
  const [row] = await db.query<Held>(
    `SELECT (SELECT count(*)::int FROM charges WHERE account = $1) AS charges,
            (SELECT count(*)::int FROM charges WHERE account = $1 AND status = 'succeeded') AS succeeded,
            (SELECT count(*)::int FROM provider_charges WHERE account = $1) AS "providerCharges",
            (SELECT count(*)::int FROM mailer_receipts WHERE account = $1) AS receipts`,
    [account],
  );
  return row;
}

describe('a charge in steps, its process SIGKILLed inside and after each step, then retried', () => {
  const survivors = new Map<`${Mode} ${Platform}`, RunningApp>();

  beforeAll(async () => {
    for (const mode of ['standard', 'transactional'] as const) {
      for (const platform of PLATFORMS) {
        const transactional = mode === 'transactional';
        const survivor = await startSampleApp({ databaseUrl: db.url, leaseSeconds: 1, transactional, platform });
        survivors.set(`${mode} ${platform}`, survivor);
      }
    }
  });

  afterAll(async () => {
    for (const survivor of survivors.values()) await survivor.close();
  });

  // Every point in standard mode, on Express; transactional mode around the external calls, on both platforms; and
  // the outcome stored before the kill, replayed in either mode.
  const cases: Array<[Mode, Platform, Point, Held]> = [
    ...POINTS.map((point): [Mode, Platform, Point, Held] => ['standard', 'express', point, heldInStandardMode(point)]),
    ...PLATFORMS.flatMap((platform) =>
      TRANSACTIONAL_POINTS.map((point): [Mode, Platform, Point, Held] => [
        'transactional',
        platform,
        point,
        heldInTransactionalMode(point),
      ]),
    ),
    ['standard', 'express', 'after the outcome', COMPLETED],
    ['transactional', 'fastify', 'after the outcome', COMPLETED],
  ];

  it.each(cases)('%s mode on %s, killed %s', async (mode, platform, point, held) => {
    const { account, key, killedAt } = await killedAtPoint(mode, platform, point, held);
    const survivor = survivors.get(`${mode} ${platform}`) as RunningApp;
    const retry = await waitFor(
      async () => {
        const response = await postCharge(survivor.url, CHARGE, key, account);
        return response.status === 409 ? undefined : response;
      },
      mode === 'transactional' ? 'the dead holder to be seen' : 'the lease to lapse',
      mode === 'transactional' ? 2 * TRANSACTIONAL_RETRY_BOUND_MS : undefined,
    );
    const killToRetry = Date.now() - killedAt;
    if (mode === 'transactional') expect(killToRetry).toBeLessThan(TRANSACTIONAL_RETRY_BOUND_MS);
    await expectFinalAnswer(survivor, account, key, retry, point === 'after the outcome');
  });
});

describe('a charge in steps, its process SIGKILLed inside and after each step, then finished by the completer alone', () => {
  let completing: RunningApp;

  // Another instance, whose completer looks every second for charges whose lease ended at least a second ago.
  beforeAll(async () => {
    completing = await startSampleApp({
      databaseUrl: db.url,
      leaseSeconds: 1,
      transactional: false,
      completerIntervalSeconds: 1,
      completerBackoffSeconds: 1,
    });
  });
  afterAll(() => completing?.close());

  const cases: Array<[Point, Held]> = [...POINTS, 'after the outcome' as const].map((point) => [
    point,
    heldInStandardMode(point),
  ]);

  it.each(cases)('killed %s', async (point, held) => {
    const { account, key } = await killedAtPoint('standard', 'express', point, held);
    // Completed by the completer from its last step; or, killed before its first step was recorded, released (nothing
    // of it was left: its charge row rolled back with the step), for the client's retry to charge anew.
    const nothingRecorded = point === 'in-step:create-charge';
    await waitFor(async () => {
      const [record] = await db.query<{ status: string }>(
        'SELECT status FROM idempotency_records WHERE account = $1 AND idempotency_key = $2',
        [account, key],
      );
      return (nothingRecorded ? record === undefined : record?.status === 'completed') || undefined;
    }, 'the completer');
    await expect(heldFor(account)).resolves.toEqual(nothingRecorded ? held : COMPLETED);

    // The client's retry, whenever it comes, gets the final answer: the completer's, replayed.
    const retry = await postCharge(completing.url, CHARGE, key, account);
    await expectFinalAnswer(completing, account, key, retry, !nothingRecorded);
  });
});

const CHARGE = { amount: 900, currency: 'eur' };

/**
 * Spawns the sample app in `mode` on `platform`, posts a charge that stops at `point` (or completes, for the point
 * after the outcome), SIGKILLs the process there, and checks what the database holds then.
 */
async function killedAtPoint(
  mode: Mode,
  platform: Platform,
  point: Point,
  held: Held,
): Promise<{ account: string; key: string; killedAt: number }> {
  const account = `sk_test_crash_${randomUUID().slice(0, 8)}_${mode}_${platform}_${point.replace(/\W+/g, '_')}`;
  const key = randomUUID();
  const doomed = await spawnSampleApp({
    DATABASE_URL: db.url,
    IDEMPOTENCY_LEASE_SECONDS: String(LEASE_SECONDS[mode]),
    IDEMPOTENCY_TRANSACTIONAL: String(mode === 'transactional'),
    SAMPLE_PLATFORM: platform,
    ...(point === 'after the outcome' ? {} : { SAMPLE_PAUSE_AT: point }),
    PAYOUT_WORKER: 'false',
  });
  try {
    const answered = postCharge(doomed.url, CHARGE, key, account).then(
      (response) => response,
      () => 'connection lost' as const,
    );
    if (point === 'after the outcome') {
      // The answer went out: the outcome was stored before it.
      await expect(answered).resolves.toMatchObject({ status: 201 });
    } else {
      await waitFor(async () => (doomed.output().includes(`paused at ${point}`) ? true : undefined), point);
    }
    const exited = once(doomed.child, 'exit');
    const killedAt = Date.now();
    doomed.child.kill('SIGKILL');
    await exited;
    if (point !== 'after the outcome') await expect(answered).resolves.toBe('connection lost');
    await expect(heldFor(account)).resolves.toEqual(held);
    return { account, key, killedAt };
  } finally {
    await doomed.close();
  }
}

/** The retry got the charge, complete (replayed when `replayed`), one of each row; and its replay is the same. */
async function expectFinalAnswer(
  app: RunningApp,
  account: string,
  key: string,
  retry: Awaited<ReturnType<typeof postCharge>>,
  replayed: boolean,
): Promise<void> {
  expect(retry.status).toBe(201);
  expect(retry.headers['idempotent-replay']).toBe(replayed ? 'true' : undefined);
  await expect(heldFor(account)).resolves.toEqual(COMPLETED);
  const [row] = await db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [account]);
  expect(retry.body).toMatchObject({ id: row.id, status: 'succeeded' });

  const replay = await postCharge(app.url, CHARGE, key, account).expect(201);
  expect(replay.headers['idempotent-replay']).toBe('true');
  expect(replay.body).toEqual(retry.body);
}
