import { jetstreamManager } from '@nats-io/jetstream';
import { connect, nanos } from '@nats-io/transport-node';
import { Controller } from '@nestjs/common';
import { Ctx, EventPattern, Payload } from '@nestjs/microservices';
import { type JetStreamContext, JetStreamServer } from '../../src/jetstream/index.js';
import type { TestConsumer } from '../support/consumer-app.js';
import { Gate } from '../support/gate.js';
import { NATS_URL, natsJetStream, startJetStreamConsumer, uniquePrefix, useTestStream } from '../support/jetstream.js';
import { gates, payoutsConsumer } from '../support/payouts-consumer.js';
import { describeWith } from '../support/required-service.js';
import { describeOnStores } from '../support/on-each-store.js';
import { modesOn, recordsOf, recordsOn } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { statusOf, WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

/** The subjects of this run of the file: a stream of each block's, on them in turn. */
const PREFIX = uniquePrefix();
const PAYOUT = `${PREFIX}.payout.requested`;
const QUOTE = `${PREFIX}.payout.quote`;
const AUDIT = `${PREFIX}.audit`;
const DURABLE = 'payouts';

/** The delivery count of each run, by key: a redelivery shows as 2. */
const deliveriesRun = new Map<string, number[]>();
/** When each run began, by key. */
const runTimes = new Map<string, number[]>();

const PayoutsConsumer = payoutsConsumer({ event: PAYOUT, request: QUOTE }, (key, context: JetStreamContext) => {
  deliveriesRun.set(key, [...(deliveriesRun.get(key) ?? []), context.getMessage().info.deliveryCount]);
  runTimes.set(key, [...(runTimes.get(key) ?? []), Date.now()]);
});

@Controller()
class AuditConsumer {
  /** Not idempotent: the server's own settlement, ack after the handler, nak on its error. */
  @EventPattern<string>(AUDIT)
  audit(@Payload() entry: { id: string }, @Ctx() context: JetStreamContext): void {
    const { deliveryCount } = context.getMessage().info;
    deliveriesRun.set(entry.id, [...(deliveriesRun.get(entry.id) ?? []), deliveryCount]);
    if (deliveryCount === 1) throw new Error('the audit log is down');
  }
}

const server = (stream: string, more: { maxInFlight?: number } = {}) => ({
  stream,
  durable: DURABLE,
  subjects: [`${PREFIX}.>`],
  provision: 'consumer' as const,
  ackWaitSeconds: 30,
  maxDeliver: 5,
  ...more,
});

/** `server.listen()`'s callback as a promise: resolved once it listens, rejected with its start-up error. */
const listening = (server: JetStreamServer) =>
  new Promise<void>((resolve, reject) => {
    void server.listen((error) =>
      error === undefined
        ? resolve()
        : reject(error instanceof Error ? error : new Error('the server did not start', { cause: error })),
    );
  });

describeWith(natsJetStream, 'NATS JetStream consumers', () => {
  describeOnStores('records on %s', (store) => {
    // Of its own, as the runs seen: the blocks of each store use the same keys.
    const db = useTestDatabase(WORK_LOG);
    beforeAll(() => {
      deliveriesRun.clear();
      runTimes.clear();
    });

    describe.each(modesOn(store))('%s mode', (mode) => {
      const transactional = mode === 'transactional';
      const stream = useTestStream(PREFIX, `${PREFIX}_${store}_${mode}`);
      let consumer: TestConsumer;

      beforeAll(async () => {
        consumer = await startJetStreamConsumer(
          {
            ...recordsOn(store),
            database: db,
            pool: { max: 5 },
            idempotency: { singleTenant: true, transactional, retryAfterSeconds: 0.2, inFlightWaitSeconds: 10 },
            controllers: [PayoutsConsumer, AuditConsumer],
          },
          server(stream.name),
        );
      });
      afterAll(() => consumer.close());

      // Each store's own: the handler fails once per key (`fail-once`), whichever store's block runs it.
      const key = (name: string) => `${name}-${store}-${mode}`;
      const records = recordsOf(() => consumer, db);
      const runsOf = async (name: string) => (await workRowsOf(db, key(name))).length;
      const completed = (name: string) =>
        waitFor(
          async () => ((await statusOf(records, key(name))) === 'completed' ? true : undefined),
          `${name} stored`,
        );
      const allSettled = () => stream.allSettled(DURABLE);

      it('runs an event delivered twice once, and acknowledges both deliveries', async () => {
        await stream.publish(PAYOUT, { amount: 10 }, { msgId: key('event-twice') });
        await completed('event-twice');
        await stream.publish(PAYOUT, { amount: 10 }, { msgId: key('event-twice'), again: true });
        await allSettled();
        expect(await runsOf('event-twice')).toBe(1);
      });

      it('answers a request delivered twice with the bytes of its one run', async () => {
        const first = await stream.request(QUOTE, { amount: 21 }, key('request-twice'));
        const second = await stream.request(QUOTE, { amount: 21 }, key('request-twice'));
        expect(JSON.parse(first.toString())).toEqual({ response: { quoted: 42, run: expect.any(Number) } });
        expect(second.equals(first)).toBe(true);
        expect(await runsOf('request-twice')).toBe(1);
        await allSettled();
      });

      it('answers JetStreamClient.send(), and refuses at once a send the stream drops as a duplicate', async () => {
        const send = () => stream.client.send(QUOTE, { amount: 5 }, { msgId: key('client'), timeoutMs: 10_000 });
        await expect(send()).resolves.toEqual({ quoted: 10, run: expect.any(Number) });
        await expect(send()).rejects.toThrow('as a duplicate of msgId');
        expect(await runsOf('client')).toBe(1);
      });

      it('naks a message whose handler failed with a delay, and runs its redelivery once', async () => {
        await stream.publish(PAYOUT, { amount: 5, mode: 'fail-once' }, { msgId: key('fails-once') });
        await completed('fails-once');
        await allSettled();
        expect(await runsOf('fails-once')).toBe(1);
        expect(deliveriesRun.get(key('fails-once'))).toEqual([1, 2]);
        const [failed, redelivered] = runTimes.get(key('fails-once')) ?? [];
        expect(redelivered - failed).toBeGreaterThanOrEqual(190);
        expect(consumer.logger.warnings).toContainEqual(expect.stringContaining('to be redelivered in 0.2 s'));
      });

      it('answers a request whose first delivery failed with the reply of its redelivery', async () => {
        const reply = await stream.request(QUOTE, { amount: 4, mode: 'fail-once' }, key('request-fails-once'));
        expect(JSON.parse(reply.toString())).toEqual({ response: { quoted: 8, run: expect.any(Number) } });
        expect(deliveriesRun.get(key('request-fails-once'))).toEqual([1, 2]);
        await allSettled();
      });

      it('stores a final error, acknowledges it, and answers its redelivery with the same error', async () => {
        const handledBefore = consumer.handled.count;
        const first = await stream.request(QUOTE, { amount: 1, mode: 'final' }, key('final'));
        expect(JSON.parse(first.toString())).toEqual({ err: { reason: 'insufficient_funds' } });
        expect(await statusOf(records, key('final'))).toBe('completed');
        const second = await stream.request(QUOTE, { amount: 1, mode: 'final' }, key('final'));
        expect(second.equals(first)).toBe(true);
        expect(deliveriesRun.get(key('final'))).toEqual([1]);
        await allSettled();
        // Each request delivered once: acknowledged after its reply, never given back for the error it answered.
        expect(consumer.handled.count - handledBefore).toBe(2);
        expect(stream.pastMaxDeliver(DURABLE)).toEqual([]);
      });

      it('terminates a message without a key, and one whose key was used with another payload', async () => {
        const keyless = await stream.publish(PAYOUT, { amount: 3 });
        await stream.publish(PAYOUT, { amount: 3 }, { msgId: key('reused') });
        await completed('reused');
        const reused = await stream.publish(PAYOUT, { amount: 4 }, { msgId: key('reused'), again: true });
        await waitFor(async () => (stream.terminated(DURABLE).length >= 2 ? true : undefined), 'two terminations');
        expect(stream.terminated(DURABLE).sort()).toEqual([keyless.seq, reused.seq].sort());
        expect(await runsOf('reused')).toBe(1);
        expect(deliveriesRun.get('unguarded')).toBeUndefined();
        await allSettled();
      });

      it('holds a duplicate that arrives while the first delivery runs, and acknowledges it with the outcome', async () => {
        const gate = new Gate();
        gates.set(key('in-flight'), gate);
        await stream.publish(PAYOUT, { amount: 7, mode: 'gated' }, { msgId: key('in-flight') });
        await gate.reached;
        await stream.publish(PAYOUT, { amount: 7, mode: 'gated' }, { msgId: key('in-flight'), again: true });
        await waitFor(
          async () => ((await stream.stateOf(DURABLE)).unacknowledged === 2 ? true : undefined),
          'the duplicate to be delivered',
        );
        gate.release();
        await completed('in-flight');
        await allSettled();
        expect(await runsOf('in-flight')).toBe(1);
        expect(stream.terminated(DURABLE)).toHaveLength(2);
      });

      it('terminates a message whose payload is not JSON, and one on a subject no handler has, never giving them back', async () => {
        const before = stream.terminated(DURABLE).length;
        const handledBefore = consumer.handled.count;
        const notJson = await stream.publishBytes(PAYOUT, new TextEncoder().encode('{"amount": 1'));
        const unhandled = await stream.publish(`${PREFIX}.nobody`, { amount: 1 }, { msgId: key('nobody') });
        await waitFor(
          async () => (stream.terminated(DURABLE).length >= before + 2 ? true : undefined),
          'two terminations',
        );
        expect(stream.terminated(DURABLE).slice(before).sort()).toEqual([notJson.seq, unhandled.seq].sort());
        await allSettled();
        expect(consumer.handled.count).toBe(handledBefore);
        expect(stream.pastMaxDeliver(DURABLE)).toEqual([]);
        expect(consumer.logger.errors).toEqual(
          expect.arrayContaining([
            expect.stringContaining(`A message to ${PAYOUT} was terminated: its payload is not JSON`),
            expect.stringContaining(`A message to ${PREFIX}.nobody was terminated: no handler has the pattern`),
          ]),
        );
      });

      it('acknowledges a message of a handler without @Idempotent() after it ends, and naks it when it fails', async () => {
        await stream.publish(AUDIT, { id: key('audit') });
        await allSettled();
        expect(deliveriesRun.get(key('audit'))).toEqual([1, 2]);
      });

      it('left no message unsettled, and no handler waited for, when it closes', async () => {
        await consumer.close();
        expect(await stream.stateOf(DURABLE)).toEqual({ undelivered: 0, unacknowledged: 0 });
        // A request given back has no reply from its delivery: the server does not wait for one.
        expect(consumer.logger.warnings).not.toContainEqual(expect.stringContaining('still ran after'));
      });
    });

    // Transactional on PostgreSQL; on Redis, in standard mode, the second on the first one's records.
    describe('two instances on one durable consumer', () => {
      const stream = useTestStream(PREFIX, `${PREFIX}_${store}_two`);
      const consumers: TestConsumer[] = [];
      const records = recordsOf(() => consumers[0], db);

      beforeAll(async () => {
        for (let i = 0; i < 2; i += 1) {
          consumers.push(
            await startJetStreamConsumer(
              {
                ...recordsOn(store, { keyPrefix: consumers[0]?.redis?.keyPrefix }),
                database: db,
                pool: { max: 4 },
                idempotency: { singleTenant: true, transactional: store === 'postgres', retryAfterSeconds: 0.2 },
                controllers: [PayoutsConsumer],
              },
              server(stream.name, { maxInFlight: 1 }),
            ),
          );
        }
      });
      afterAll(() => Promise.all(consumers.map((consumer) => consumer.close())));

      it('runs a message once when its duplicate reaches the other instance while the first runs', async () => {
        const gate = new Gate();
        gates.set('two-instances', gate);
        await stream.publish(PAYOUT, { amount: 9, mode: 'gated' }, { msgId: 'two-instances' });
        await gate.reached;
        // The first instance runs one message at a time and pulls no more meanwhile: the duplicate goes to the other.
        await stream.publish(PAYOUT, { amount: 9, mode: 'gated' }, { msgId: 'two-instances', again: true });
        await waitFor(
          async () => ((await stream.stateOf(DURABLE)).unacknowledged === 2 ? true : undefined),
          'the duplicate to be delivered',
        );
        gate.release();
        await waitFor(
          async () => ((await statusOf(records, 'two-instances')) === 'completed' ? true : undefined),
          'stored',
        );
        await stream.allSettled(DURABLE);
        await Promise.all(consumers.map((consumer) => consumer.close()));
        expect(await workRowsOf(db, 'two-instances')).toHaveLength(1);
        expect(deliveriesRun.get('two-instances')).toEqual([1]);
      });
    });

    describe('keys from a header of the application, and messages without one run unguarded', () => {
      const stream = useTestStream(PREFIX, `${PREFIX}_${store}_keys`);
      let consumer: TestConsumer;
      const records = recordsOf(() => consumer, db);

      beforeAll(async () => {
        consumer = await startJetStreamConsumer(
          {
            ...recordsOn(store),
            database: db,
            pool: { max: 4 },
            idempotency: { singleTenant: true },
            controllers: [PayoutsConsumer],
          },
          server(stream.name),
          { key: { header: 'Payout-Id' }, withoutKey: 'run' },
        );
      });
      afterAll(() => consumer.close());

      it('takes the key from the header, and runs a message without one with a warning, acknowledged', async () => {
        const withKey = { headers: { 'Payout-Id': 'from-header' } };
        await stream.client.emit(PAYOUT, { amount: 2 }, withKey);
        await stream.client.emit(PAYOUT, { amount: 2 }, withKey);
        await stream.client.emit(PAYOUT, { amount: 2 }, { msgId: 'ignored-id' });
        await waitFor(async () => ((await workRowsOf(db, 'unguarded')).length === 1 ? true : undefined), 'the run');
        await waitFor(
          async () => ((await statusOf(records, 'from-header')) === 'completed' ? true : undefined),
          'stored',
        );
        await stream.allSettled(DURABLE);
        await consumer.close();
        expect(await workRowsOf(db, 'from-header')).toHaveLength(1);
        expect(consumer.logger.warnings).toContainEqual(expect.stringContaining("run unguarded (withoutKey: 'run')"));
      });
    });
  });

  describe('provisioning', () => {
    it('creates the stream and the consumer it is told to, with their settings, and closes', async () => {
      const name = `${PREFIX}_provisioned`;
      const server = new JetStreamServer({
        servers: NATS_URL,
        stream: name,
        durable: DURABLE,
        subjects: [`${PREFIX}_provisioned.>`],
        provision: 'stream-and-consumer',
        streamConfig: { max_age: nanos(60_000) },
        ackWaitSeconds: 12,
        maxDeliver: 4,
        backoffSeconds: [1, 5],
      });
      const connection = await connect({ servers: NATS_URL });
      const manager = await jetstreamManager(connection);
      try {
        await listening(server);
        await server.close();
        const { config: stream } = await manager.streams.info(name);
        expect(stream).toMatchObject({ subjects: [`${PREFIX}_provisioned.>`], max_age: nanos(60_000) });
        const { config: consumer } = await manager.consumers.info(name, DURABLE);
        expect(consumer).toMatchObject({
          durable_name: DURABLE,
          ack_policy: 'explicit',
          // A backoff's first entry is the consumer's ack wait.
          ack_wait: nanos(1_000),
          max_deliver: 4,
          backoff: [nanos(1_000), nanos(5_000)],
          filter_subject: `${PREFIX}_provisioned.>`,
        });
      } finally {
        await manager.streams.delete(name).catch(() => undefined);
        await connection.close();
      }
    });

    it('refuses to start on a consumer that does not exist, when told to create nothing', async () => {
      const server = new JetStreamServer({ servers: NATS_URL, stream: `${PREFIX}_missing`, durable: DURABLE });
      await expect(listening(server)).rejects.toThrow(/not found/);
    });
  });
});
