import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyCompleter, IdempotencyContext } from '../../src/index.js';
import { rabbitmq, useRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { describeWith } from '../support/required-service.js';
import { useTestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * A consumer's operation that its broker gave up on: its handler recorded a step, then failed on every delivery until
 * the quorum queue dead-lettered the message. No redelivery will come; the completer, registered for the consumer's
 * endpoint, finishes it from its step, and a copy of the message published later is acknowledged with its outcome,
 * never run.
 */

const db = useTestDatabase();

/** What the payout handler did, by key. */
const runs = { reserve: new Map<string, number>(), pay: new Map<string, number>() };
const counted = (counts: Map<string, number>, key: string) => counts.set(key, (counts.get(key) ?? 0) + 1).get(key);
/** The payout service is down until a test brings it back. */
let payoutServiceUp = false;

@Controller()
class PayoutsConsumer {
  constructor(private readonly idempotency: IdempotencyContext) {}

  @Idempotent()
  @EventPattern('payout.requested')
  async pay(@Payload() payout: { amount: number }): Promise<void> {
    await this.payout(payout.amount);
  }

  /** What the handler does, and the completion does again from the step recorded. */
  async payout(amount: number): Promise<{ paid: number }> {
    const key = this.idempotency.run?.scope.key as string;
    await this.idempotency.step('reserve', async () => counted(runs.reserve, key));
    if (!payoutServiceUp) throw new Error('the payout service is down');
    await this.idempotency.step('pay', async () => counted(runs.pay, key));
    return { paid: amount };
  }
}

describeWith(rabbitmq, 'The completer of a RabbitMQ consumer', () => {
  // Dead-lettered past its second delivery.
  const queue = useTestQueue(1);
  const consumer = useRabbitMqConsumer(queue, () => ({
    database: db,
    idempotency: {
      singleTenant: true,
      retryAfterSeconds: 0.1,
      completer: { intervalSeconds: false, backoffSeconds: 1 },
    },
    controllers: [PayoutsConsumer],
  }));

  it('finishes from its step the operation of a message dead-lettered after it, and a copy of the message replays it', async () => {
    const key = randomUUID();
    await queue.publish('payout.requested', { amount: 7 }, { messageId: key });
    await waitFor(async () => ((await queue.takeDeadLetters()).length === 1 ? true : undefined), 'the dead letter');
    expect(runs.reserve.get(key)).toBe(1);
    const [record] = await db.query<{ endpoint: string; status: string }>(
      'SELECT endpoint, status FROM idempotency_records WHERE idempotency_key = $1',
      [key],
    );
    expect(record).toEqual({ endpoint: 'rabbitmq payout.requested PayoutsConsumer.pay', status: 'in_progress' });

    const handler = consumer.app.get(PayoutsConsumer);
    consumer.app.get(IdempotencyCompleter).register(record.endpoint, async () => ({ body: await handler.payout(7) }));
    payoutServiceUp = true;
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 minute' WHERE idempotency_key = $1`,
      [key],
    );
    await expect(consumer.app.get(IdempotencyCompleter).completeAbandoned()).resolves.toMatchObject({ completed: 1 });
    expect({ reserve: runs.reserve.get(key), pay: runs.pay.get(key) }).toEqual({ reserve: 1, pay: 1 });

    const handledBefore = consumer.handled.count;
    await queue.publish('payout.requested', { amount: 7 }, { messageId: key });
    await waitFor(async () => (consumer.handled.count > handledBefore ? true : undefined), 'the copy handled');
    expect({ reserve: runs.reserve.get(key), pay: runs.pay.get(key) }).toEqual({ reserve: 1, pay: 1 });
    expect(await queue.ready()).toBe(0);
    await expect(queue.takeDeadLetters()).resolves.toEqual([]);
  });
});
