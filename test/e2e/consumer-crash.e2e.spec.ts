import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { Logger } from '@nestjs/common';
import type { PayoutPausePoint } from '../../sample-app/sample-config.js';
import { IdempotencyRun } from '../../src/index.js';
import { type IdempotencyClaim } from '../../src/store/index.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { describeWith } from '../support/required-service.js';
import { type SpawnedApp, spawnSampleApp } from '../support/sample-app.js';
import { SAMPLE_PAYOUT_BROKERS } from '../support/sample-payout-brokers.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The sample app consuming payout requests from each broker (transactional mode) is SIGKILLed at each point of a message
 * (`SAMPLE_PAUSE_AT` stops it there, event loop and all, until the kill), then started again: the broker redelivers
 * the message, and after it there is one payout, one payout at the provider (under the key derived from the run), a
 * completed record, nothing left unacknowledged (nor dead), and a request's caller has the one reply. The restarted
 * process takes a dead holder's claim over at once (its transaction died with it), though the lease is far longer
 * than the test's bound. JetStream redelivers only after the consumer's ack wait, a short one here
 * (`sample-payout-brokers.ts`).
 */
type Variant = 'event' | 'request';

interface Held {
  payouts: number;
  providerPayouts: number;
  record: 'in_progress' | 'completed' | null;
}

/** What the database holds while the process is stopped at each point. */
const HELD_AT: Record<PayoutPausePoint, Held> = {
  'before-claim': { payouts: 0, providerPayouts: 0, record: null },
  // The provider paid; the payout row and the outcome are in the run's open transaction, which the kill rolls back.
  'after-provider': { payouts: 0, providerPayouts: 1, record: 'in_progress' },
  // Committed together; the message not yet acknowledged.
  'before-ack': { payouts: 1, providerPayouts: 1, record: 'completed' },
};

const PATTERNS: Record<Variant, string> = { event: 'payouts.requested', request: 'payouts.create' };

/** Far longer than the test may take: a restarted consumer that waited it out would fail it. */
const LEASE_SECONDS = '600';
/** From the kill to the redelivery settled by the restarted process (its start, a few seconds, included). */
const REDELIVERY_BOUND_MS = 30_000;

const cases: Array<[Variant, PayoutPausePoint]> = (['event', 'request'] as const).flatMap((variant) =>
  (['before-claim', 'after-provider', 'before-ack'] as const).map((point): [Variant, PayoutPausePoint] => [
    variant,
    point,
  ]),
);

for (const broker of SAMPLE_PAYOUT_BROKERS) {
  describeWith(
    broker.service,
    `a payout consumer on ${broker.name} SIGKILLed at each point of a message, then restarted`,
    () => {
      let db: TestDatabase;

      beforeAll(async () => {
        // What Nest's RabbitMQ client logs (each connection) is kept, not printed.
        Logger.overrideLogger(new RecordingLogger());
        db = await createTestDatabase();
      });

      afterAll(async () => {
        await db?.drop();
      });

      async function heldFor(account: string): Promise<Held> {
        const [row] = await db.query<Held>(
          `SELECT (SELECT count(*)::int FROM payout_jobs WHERE account = $1) AS payouts,
              (SELECT count(*)::int FROM provider_payouts WHERE account = $1) AS "providerPayouts",
              (SELECT status FROM idempotency_records WHERE account = $1) AS record`,
          [account],
        );
        return row;
      }

      it.each(cases)('%s, killed %s', async (variant, point) => {
        const account = `sk_test_${variant}_${point.replace('-', '_')}`;
        const key = randomUUID();
        const destination = await broker.open();
        const env = {
          ...destination.env,
          DATABASE_URL: db.url,
          // Three connections: the fewest with which a transactional claim takes the advisory lock a takeover relies on.
          DATABASE_POOL_SIZE: '3',
          PAYOUT_WORKER: 'false',
          IDEMPOTENCY_LEASE_SECONDS: LEASE_SECONDS,
        };
        let restarted: SpawnedApp | undefined;
        try {
          const doomed = await spawnSampleApp({ ...env, SAMPLE_PAUSE_AT: point });
          const payload = { account, amount: 1500, currency: 'eur' };
          const reply =
            variant === 'request'
              ? destination.send(PATTERNS.request, payload, key)
              : destination.emit(PATTERNS.event, payload, key);
          // A reply is sent before the acknowledgement, and so never by a process stopped before its commit.
          let replied = false;
          void reply.then(() => (replied = true)).catch(() => undefined);

          await waitFor(
            async () => (doomed.output().includes(`paused at ${point}`) ? true : undefined),
            `a pause ${point}`,
          );
          await expect(heldFor(account)).resolves.toEqual(HELD_AT[point]);
          const exited = once(doomed.child, 'exit');
          const killedAt = Date.now();
          doomed.child.kill('SIGKILL');
          await exited;
          if (variant === 'request' && point !== 'before-ack') expect(replied).toBe(false);

          restarted = await spawnSampleApp(env);
          const output = () => (restarted as SpawnedApp).output();
          await waitFor(
            async () => (output().includes(`Message ${key} acknowledged`) ? true : undefined),
            'the redelivery to be acknowledged',
            REDELIVERY_BOUND_MS,
          );
          expect(Date.now() - killedAt).toBeLessThan(REDELIVERY_BOUND_MS);

          await expect(heldFor(account)).resolves.toEqual({ payouts: 1, providerPayouts: 1, record: 'completed' });
          const [payout] = await db.query<{ id: string; providerPayoutId: string; key: string }>(
            'SELECT id, provider_payout_id AS "providerPayoutId", idempotency_key AS key FROM payout_jobs WHERE account = $1',
            [account],
          );
          const [scope] = await db.query<IdempotencyClaim['scope']>(
            'SELECT account, endpoint, idempotency_key AS key FROM idempotency_records WHERE account = $1',
            [account],
          );
          const [atProvider] = await db.query<{ id: string; key: string }>(
            'SELECT id, idempotency_key AS key FROM provider_payouts WHERE account = $1',
            [account],
          );
          expect(scope).toEqual({
            account,
            endpoint: `${broker.name} ${PATTERNS[variant]} ${consumerOf(variant)}`,
            key,
          });
          expect(atProvider.key).toBe(new IdempotencyRun({ scope } as IdempotencyClaim, false).deriveKey('provider'));
          expect(payout).toEqual({ id: expect.any(String), providerPayoutId: atProvider.id, key });
          if (variant === 'request') {
            await expect(reply).resolves.toEqual({
              id: payout.id,
              object: 'payout',
              amount: 1500,
              currency: 'eur',
              status: 'paid',
            });
          }
          // Paid by the restarted process only where the doomed one had not committed.
          expect(output().includes(`Paid ${payout.id}`)).toBe(point !== 'before-ack');

          // Stopped gracefully, it gives back what it has not acknowledged: nothing (the broker may take a moment to
          // count the last acknowledgement, sent without waiting for its confirmation).
          const stopped = once(restarted.child, 'exit');
          restarted.child.kill('SIGTERM');
          await stopped;
          await waitFor(
            async () => ((await destination.unsettled()) === 0 ? true : undefined),
            'nothing left unsettled',
          );
        } finally {
          await restarted?.close();
          await destination.close();
        }
      });
    },
  );
}

function consumerOf(variant: Variant): string {
  return `PayoutRequestsConsumer.${variant === 'event' ? 'requested' : 'create'}`;
}
