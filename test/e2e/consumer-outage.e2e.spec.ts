import { natsJetStream, startJetStreamConsumer, uniquePrefix, useTestStream } from '../support/jetstream.js';
import type { TestConsumer } from '../support/consumer-app.js';
import { payoutsConsumer } from '../support/payouts-consumer.js';
import { rabbitmq, startRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { describeWith } from '../support/required-service.js';
import { type TcpProxy, useTcpProxy } from '../support/tcp-proxy.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import type { TestModuleOptions } from '../support/test-app.js';
import { WORK_LOG } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The database unreachable for longer than a delivery limit's worth of give-backs (the docs' limit of 5): the
 * connection refused, or black-holed (nothing answers, nothing is refused). Each message delivered meanwhile is held
 * by the consumer and claimed again, never given back for a fault that is not its own, so that every one runs once
 * after the restore and none is dead-lettered. A give-back costs a delivery: at the scaled `retryAfterSeconds` of
 * 0.2 s, doubled at each, five of them (6.2 s, and a `storeTimeoutSeconds` of 1 s for each claim when black-holed)
 * dead-letter a message well within this outage.
 *
 * CI runs it scaled down: an outage of 16 s, held for up to 60 s. `npm run test:outage` runs it at the docs' settings
 * (every default: `retryAfterSeconds` 2, `holdSeconds` 600, `storeTimeoutSeconds` 5, TypeORM's pool) through an
 * outage of `OUTAGE_SECONDS` (300 there: 5 minutes). docs/rabbitmq.md and docs/jetstream.md give its result.
 */
const FULL_RUN = process.env.OUTAGE_SECONDS !== undefined;
const OUTAGE_MS = Number(process.env.OUTAGE_SECONDS ?? 16) * 1000;
const MESSAGES = 6;

/** The consumer's settings: the docs' defaults in a full run; scaled down (with a short outage) otherwise. */
function consumerOptions(proxy: TcpProxy, db: TestDatabase, transactional: boolean): TestModuleOptions {
  return FULL_RUN
    ? {
        database: { url: proxy.urlFor(db.url) },
        idempotency: { singleTenant: true, transactional },
        controllers: [PayoutsConsumer],
      }
    : {
        database: { url: proxy.urlFor(db.url) },
        pool: { max: 4, connectionTimeoutMillis: 1000 },
        idempotency: { singleTenant: true, transactional, retryAfterSeconds: 0.2, storeTimeoutSeconds: 1 },
        controllers: [PayoutsConsumer],
      };
}
const holdSeconds = FULL_RUN ? undefined : 60;

const PREFIX = uniquePrefix();
const PayoutsConsumer = payoutsConsumer({ event: `${PREFIX}.payout`, request: `${PREFIX}.quote` });

/** Each broker meets each fault, in one mode or the other (a test of each lasts the outage). */
const RABBITMQ_FAULTS = [
  ['refused, standard mode', 'refused', false],
  ['black-holed, transactional mode', 'black-holed', true],
] as const;
const JETSTREAM_FAULTS = [
  ['refused, transactional mode', 'refused', true],
  ['black-holed, standard mode', 'black-holed', false],
] as const;

/** Runs `MESSAGES` published during the outage; resolves to how many were lost (dead-lettered, past max_deliver). */
async function throughOutage(
  db: TestDatabase,
  proxy: TcpProxy,
  fault: 'refused' | 'black-holed',
  keyPrefix: string,
  publish: (key: string) => Promise<void>,
  lost: () => Promise<number>,
): Promise<void> {
  if (fault === 'refused') proxy.takeDown();
  else proxy.blackHole();
  const keys = Array.from({ length: MESSAGES }, (_, index) => `${keyPrefix}-${index}`);
  for (const key of keys) await publish(key);
  const outageEnds = Date.now() + OUTAGE_MS;
  let lostDuringOutage = 0;
  // A lost message is lost for good: watched for during the outage, not only after it.
  while (Date.now() < outageEnds && lostDuringOutage === 0) {
    lostDuringOutage = await lost();
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  proxy.bringUp();
  expect(lostDuringOutage).toBe(0);
  const runs = () =>
    db.query<{ key: string; runs: number }>(
      'SELECT key, count(*)::int AS runs FROM work_log WHERE key LIKE $1 GROUP BY key',
      [`${keyPrefix}-%`],
    );
  const lostAfter = await waitFor(
    async () => {
      const [ran, lostNow] = [await runs(), await lost()];
      return ran.length === MESSAGES || lostNow > 0 ? lostNow : undefined;
    },
    'every message to run after the restore (or one to be lost)',
    FULL_RUN ? 120_000 : 30_000,
  );
  expect(lostAfter).toBe(0);
  expect((await runs()).filter(({ runs: count }) => count !== 1)).toEqual([]);
}

const testTimeout = OUTAGE_MS + (FULL_RUN ? 180_000 : 45_000);

describeWith(rabbitmq, 'RabbitMQ consumers through a database outage (x-delivery-limit 5)', () => {
  const db = useTestDatabase(WORK_LOG);
  const proxy = useTcpProxy(db);

  describe.each(RABBITMQ_FAULTS)('%s', (name, fault, transactional) => {
    const queue = useTestQueue(5);
    let consumer: TestConsumer;
    beforeAll(async () => {
      consumer = await startRabbitMqConsumer(consumerOptions(proxy, db, transactional), queue, {
        holdSeconds,
        prefetchCount: 10,
      });
    });
    afterAll(() => consumer.close());

    it(
      'holds every message delivered meanwhile, runs each once after the restore, and dead-letters none',
      async () => {
        let dead = 0;
        await throughOutage(
          db,
          proxy,
          fault,
          `rmq-${name.replace(/\W+/g, '-')}`,
          (key) => queue.publish(`${PREFIX}.payout`, { amount: 1 }, { messageId: key }),
          async () => (dead += (await queue.takeDeadLetters()).length),
        );
        expect(consumer.logger.warnings).toContainEqual(expect.stringContaining('the consumer holds it and claims it'));
      },
      testTimeout,
    );
  });
});

describeWith(natsJetStream, 'JetStream consumers through a database outage (max_deliver 5)', () => {
  const db = useTestDatabase(WORK_LOG);
  const proxy = useTcpProxy(db);

  describe.each(JETSTREAM_FAULTS)('%s', (name, fault, transactional) => {
    const durable = `outage_${name.replace(/\W+/g, '_')}`;
    const prefix = uniquePrefix();
    const Consumer = payoutsConsumer({ event: `${prefix}.payout`, request: `${prefix}.quote` });
    const stream = useTestStream(prefix, `${prefix}_outage`);
    let consumer: TestConsumer;
    beforeAll(async () => {
      consumer = await startJetStreamConsumer(
        { ...consumerOptions(proxy, db, transactional), controllers: [Consumer] },
        { stream: stream.name, durable, subjects: [`${prefix}.>`], provision: 'consumer', maxDeliver: 5 },
        { holdSeconds },
      );
    });
    afterAll(() => consumer.close());

    it(
      'holds every message delivered meanwhile, runs each once after the restore, and loses none',
      async () => {
        await throughOutage(
          db,
          proxy,
          fault,
          `js-${name.replace(/\W+/g, '-')}`,
          async (key) => void (await stream.publish(`${prefix}.payout`, { amount: 1 }, { msgId: key })),
          async () => stream.pastMaxDeliver(durable).length + stream.terminated(durable).length,
        );
      },
      testTimeout,
    );
  });
});
