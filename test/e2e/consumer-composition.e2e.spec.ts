import { createHash, randomUUID } from 'node:crypto';
import { canonicalJson } from '../../src/shared/canonical-json.js';
import { rabbitmq, type TestQueue, useRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { payoutsConsumer } from '../support/payouts-consumer.js';
import { describeWith } from '../support/required-service.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

const PayoutsConsumer = payoutsConsumer({ event: 'payout.requested', request: 'payout.quote' });

/** Waits until the message of `key` has run, or was dead-lettered; resolves to the dead letters taken. */
async function ranOrDeadLettered(db: TestDatabase, queue: TestQueue, key: string, timeoutMs: number) {
  const dead: unknown[] = [];
  await waitFor(
    async () => {
      dead.push(...(await queue.takeDeadLetters()));
      return dead.length > 0 || (await workRowsOf(db, key)).length > 0 ? true : undefined;
    },
    `the message ${key} to run or be dead-lettered`,
    timeoutMs,
  );
  return dead;
}

/**
 * Known faults, reported and not fixed (the fix is a design change of how consumers give messages back): each test
 * is `it.failing`, so that the suite passes while they stand and fails once they are fixed, to be turned into `it`.
 * A give-back that is not the message's fault (the database unreachable, a key an orphaned claim holds) costs a
 * delivery of the queue's `x-delivery-limit`, every `retryAfterSeconds`.
 */
describeWith(rabbitmq, 'RabbitMQ consumers given back for what is not their fault', () => {
  const db = useTestDatabase(WORK_LOG);

  describe('while the database is down', () => {
    const queue = useTestQueue(5);
    const proxy = useTcpProxy(db);
    const consumer = useRabbitMqConsumer(queue, () => ({
      database: { url: proxy.urlFor(db.url) },
      pool: { max: 3, connectionTimeoutMillis: 1000 },
      idempotency: { singleTenant: true, retryAfterSeconds: 0.2, storeTimeoutSeconds: 1 },
      controllers: [PayoutsConsumer],
    }));

    it.failing(
      'keep the message, and run it once the database is back',
      async () => {
        proxy.takeDown();
        await queue.publish('payout.requested', { amount: 3 }, { messageId: 'database-down' });
        // More failed claims than the queue's delivery limit (an outage longer than 5 × retryAfterSeconds), or the
        // message dead-lettered first.
        const claimsFailed = () => consumer.logger.errors.filter((line) => line.includes('"database-down"')).length;
        const dead: unknown[] = [];
        await waitFor(async () => {
          dead.push(...(await queue.takeDeadLetters()));
          return claimsFailed() > 5 || dead.length > 0 ? true : undefined;
        }, 'the claims to fail');
        proxy.bringUp();
        dead.push(...(await ranOrDeadLettered(db, queue, 'database-down', 15_000)));
        expect(dead).toEqual([]);
      },
      30_000,
    );
  });

  describe("with inFlight: 'conflict' module-wide, after a consumer died holding the key", () => {
    const queue = useTestQueue(5);
    useRabbitMqConsumer(queue, () => ({
      database: db,
      pool: { max: 3 },
      idempotency: { singleTenant: true, inFlight: 'conflict' },
      controllers: [PayoutsConsumer],
    }));

    it.failing(
      'run the redelivered message once the dead claim lapses',
      async () => {
        const payload = { amount: 4 };
        // What a consumer SIGKILLed in its handler leaves in standard mode: its claim, with the consumers' lease (15 s).
        await db.query(
          `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, attempts,
           created_at, locked_until, expires_at, lock_held)
         VALUES ('', 'rabbitmq payout.requested PayoutsConsumer.pay', 'orphaned', $1, 'in_progress', $2, 1, now(),
           now() + interval '15 seconds', now() + interval '1 day', false)`,
          [createHash('sha256').update(canonicalJson(payload)).digest('hex'), randomUUID()],
        );
        await queue.publish('payout.requested', payload, { messageId: 'orphaned' });
        expect(await ranOrDeadLettered(db, queue, 'orphaned', 30_000)).toEqual([]);
      },
      40_000,
    );
  });
});
