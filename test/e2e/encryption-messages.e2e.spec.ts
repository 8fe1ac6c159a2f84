import { randomBytes } from 'node:crypto';
import { payoutsConsumer } from '../support/payouts-consumer.js';
import { rabbitmq, useRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { describeWith } from '../support/required-service.js';
import { useTestDatabase } from '../support/test-database.js';
import { statusOf, WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

// Issue 21, "Protect", on a message consumer: its outcomes are stored encrypted, and a delivery whose record cannot be
// decrypted is dead-lettered (redelivering it would be refused for ever), its handler never run again.

const PayoutsConsumer = payoutsConsumer({ event: 'payout.requested', request: 'payout.quote' });
const MARKER = 'PLAINTEXT-REPLY-MARKER';

describeWith(rabbitmq, 'encrypted outcomes of a RabbitMQ consumer', () => {
  const db = useTestDatabase(WORK_LOG);
  const queue = useTestQueue();
  const consumer = useRabbitMqConsumer(queue, () => ({
    database: db,
    pool: { max: 3 },
    idempotency: { singleTenant: true, encryption: { keys: [{ id: 'k1', key: randomBytes(32) }] }, replayCache: false },
    controllers: [PayoutsConsumer],
  }));

  it('stores the outcome sealed, and dead-letters a redelivery whose record was altered, running nothing', async () => {
    const key = 'altered-record';
    await queue.publish('payout.requested', { amount: 7, note: MARKER }, { messageId: key });
    await waitFor(async () => ((await statusOf(db, key)) === 'completed' ? true : undefined), 'the outcome stored');
    const [row] = await db.query<{ body: Buffer }>(
      'SELECT response_body AS body FROM idempotency_records WHERE idempotency_key = $1',
      [key],
    );
    expect(row?.body.subarray(2, 4).toString()).toBe('k1'); // an envelope sealed with k1
    // Cut its tag and ciphertext short, as a truncated copy would be.
    await db.query(
      'UPDATE idempotency_records SET response_body = substring(response_body FROM 1 FOR 20) WHERE idempotency_key = $1',
      [key],
    );
    await queue.publish('payout.requested', { amount: 7, note: MARKER }, { messageId: key });
    const dead = await waitFor(async () => {
      const taken = await queue.takeDeadLetters();
      return taken.length > 0 ? taken : undefined;
    }, 'the redelivery dead-lettered');
    expect(dead.map(({ data }) => data)).toEqual([{ amount: 7, note: MARKER }]);
    expect(await workRowsOf(db, key)).toHaveLength(1);
    expect(consumer.logger.errors).toEqual([expect.stringMatching(/cannot be read: the envelope is truncated/)]);
    expect(consumer.logger.warnings).toContainEqual(
      expect.stringMatching(/rejected \(idempotency_record_unreadable\)/),
    );
  });
});
