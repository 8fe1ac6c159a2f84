import { natsJetStream, startJetStreamConsumer, uniquePrefix, useTestStream } from '../support/jetstream.js';
import type { TestConsumer } from '../support/consumer-app.js';
import { payoutsConsumer } from '../support/payouts-consumer.js';
import { describeWith } from '../support/required-service.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { useTestDatabase } from '../support/test-database.js';
import { WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

const PREFIX = uniquePrefix();
const PayoutsConsumer = payoutsConsumer({ event: `${PREFIX}.payout`, request: `${PREFIX}.quote` });

/**
 * A known fault, reported and not fixed (`it.failing`, to be turned into `it` once fixed): each claim that fails while
 * the database is down gives the message back (`nak`, after `retryAfterSeconds`), which counts toward the consumer's
 * `max_deliver`; past it, JetStream never delivers the message again.
 */
describeWith(natsJetStream, 'a JetStream consumer while its database is down', () => {
  const db = useTestDatabase(WORK_LOG);
  const stream = useTestStream(PREFIX, `${PREFIX}_outage`);
  const proxy = useTcpProxy(db);
  let consumer: TestConsumer;
  beforeAll(async () => {
    consumer = await startJetStreamConsumer(
      {
        database: { url: proxy.urlFor(db.url) },
        pool: { max: 3, connectionTimeoutMillis: 1000 },
        idempotency: { singleTenant: true, retryAfterSeconds: 0.2, storeTimeoutSeconds: 1 },
        controllers: [PayoutsConsumer],
      },
      { stream: stream.name, durable: 'payouts', subjects: [`${PREFIX}.>`], provision: 'consumer', maxDeliver: 5 },
    );
  });
  afterAll(() => consumer.close());

  it.failing(
    'runs the message once the database is back',
    async () => {
      proxy.takeDown();
      await stream.publish(`${PREFIX}.payout`, { amount: 3 }, { msgId: 'js-db-down' });
      const claimsFailed = () => consumer.logger.errors.filter((line) => line.includes('Claiming key')).length;
      await waitFor(async () => (claimsFailed() >= 5 ? true : undefined), 'max_deliver failed claims');
      proxy.bringUp();
      await waitFor(
        async () => ((await workRowsOf(db, 'js-db-down')).length === 1 ? true : undefined),
        'the run',
        10_000,
      );
    },
    40_000,
  );
});
