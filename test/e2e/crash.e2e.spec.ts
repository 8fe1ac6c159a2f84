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
 * again, the external services deduplicating by the steps' keys.
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
    const account = `sk_test_crash_${mode}_${platform}_${point.replace(/\W+/g, '_')}`;
    const key = randomUUID();
    const charge = { amount: 900, currency: 'eur' };
    const doomed = await spawnSampleApp({
      DATABASE_URL: db.url,
      IDEMPOTENCY_LEASE_SECONDS: String(LEASE_SECONDS[mode]),
      IDEMPOTENCY_TRANSACTIONAL: String(mode === 'transactional'),
      SAMPLE_PLATFORM: platform,
      ...(point === 'after the outcome' ? {} : { SAMPLE_PAUSE_AT: point }),
      PAYOUT_WORKER: 'false',
    });
    try {
      const answered = postCharge(doomed.url, charge, key, account).then(
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

      const survivor = survivors.get(`${mode} ${platform}`) as RunningApp;
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
      expect(retry.headers['idempotent-replay']).toBe(point === 'after the outcome' ? 'true' : undefined);
      await expect(heldFor(account)).resolves.toEqual({ charges: 1, succeeded: 1, providerCharges: 1, receipts: 1 });
      const [row] = await db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [account]);
      expect(retry.body).toMatchObject({ id: row.id, status: 'succeeded' });

      const replay = await postCharge(survivor.url, charge, key, account).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.body).toEqual(retry.body);
    } finally {
      await doomed.close();
    }
  });
});
