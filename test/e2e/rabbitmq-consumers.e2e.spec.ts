import { Controller, type Type } from '@nestjs/common';
import { EventPattern, type MicroserviceOptions, Payload, RpcException, Transport } from '@nestjs/microservices';
import { Idempotent } from '../../src/index.js';
import { IdempotencyRabbitMQModule } from '../../src/rabbitmq/index.js';
import type { TestConsumer } from '../support/consumer-app.js';
import { Gate } from '../support/gate.js';
import {
  RABBITMQ_URL,
  rabbitmq,
  rabbitMqClient,
  request,
  startRabbitMqConsumer,
  useRabbitMqConsumer,
  useTestQueue,
} from '../support/rabbitmq.js';
import { gates, payoutsConsumer, reserveRuns } from '../support/payouts-consumer.js';
import { describeWith } from '../support/required-service.js';
import { describeOnStores } from '../support/on-each-store.js';
import { modesOn, recordsOf, recordsOn, startTestApp } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { statusOf, WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

const PayoutsConsumer = payoutsConsumer({ event: 'payout.requested', request: 'payout.quote' });

describeWith(rabbitmq, 'RabbitMQ consumers', () => {
  describeOnStores('records on %s', (store) => {
    // Of its own: the blocks of each store use the same keys.
    const db = useTestDatabase(WORK_LOG);

    describe('an accountResolver that answers a message with an RpcException', () => {
      const queue = useTestQueue();
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 3 },
        idempotency: {
          accountResolver: (context) => {
            const { account } = context.switchToRpc().getData<{ account?: string }>();
            if (account === undefined) throw new RpcException({ reason: 'no account' });
            return account;
          },
        },
        controllers: [PayoutsConsumer],
      }));

      it('rejects the message (dead-lettered), and answers a request with the exception', async () => {
        await queue.publish('payout.requested', { amount: 2 }, { messageId: 'no-account-event' });
        const client = await rabbitMqClient(queue);
        try {
          await expect(request(client, 'payout.quote', { amount: 2 }, 'no-account')).rejects.toEqual({
            reason: 'no account',
          });
        } finally {
          await client.close();
        }
        const dead: unknown[] = [];
        await waitFor(async () => {
          dead.push(...(await queue.takeDeadLetters()).map(({ data }) => data));
          return dead.length === 2 ? true : undefined;
        }, 'both messages dead-lettered');
        await consumer.close();
        expect(await queue.ready()).toBe(0);
        expect(await workRowsOf(db, 'unguarded')).toHaveLength(0);
      });
    });

    describe.each(modesOn(store))('%s mode', (mode) => {
      const transactional = mode === 'transactional';
      const queue = useTestQueue();
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 5 },
        idempotency: { singleTenant: true, transactional, retryAfterSeconds: 0.2, inFlightWaitSeconds: 10 },
        controllers: [PayoutsConsumer],
      }));

      // Each store's own: the handler fails once per key (`fail-once`), whichever store's block runs it.
      const key = (name: string) => `${name}-${store}-${transactional ? 'tx' : 'std'}`;
      const records = recordsOf(consumer, db);
      const runsOf = async (name: string) => (await workRowsOf(db, key(name))).length;
      const completed = (name: string) =>
        waitFor(
          async () => ((await statusOf(records, key(name))) === 'completed' ? true : undefined),
          `${name} stored`,
        );
      // Deliveries whose processing has ended since the test began (each is settled by then).
      let handledBefore = 0;
      beforeEach(() => (handledBefore = consumer.handled.count));
      const handled = (deliveries: number) =>
        waitFor(
          async () => (consumer.handled.count - handledBefore >= deliveries ? true : undefined),
          `${deliveries} deliveries handled`,
        );

      it('runs an event delivered twice once, and acknowledges both deliveries', async () => {
        await queue.publish('payout.requested', { amount: 10 }, { messageId: key('event-twice') });
        await completed('event-twice');
        await queue.publish('payout.requested', { amount: 10 }, { messageId: key('event-twice') });
        await handled(2);
        expect(await runsOf('event-twice')).toBe(1);
      });

      it('answers a request sent twice with the one reply of its one run', async () => {
        const client = await rabbitMqClient(queue);
        try {
          const send = () => request(client, 'payout.quote', { amount: 21 }, key('request-twice'));
          const first = await send();
          const second = await send();
          expect(first).toEqual({ quoted: 42, run: expect.any(Number) });
          expect(second).toEqual(first);
          expect(await runsOf('request-twice')).toBe(1);
        } finally {
          await client.close();
        }
      });

      it('redelivers a message whose handler failed, and runs it once when it succeeds', async () => {
        await queue.publish('payout.requested', { amount: 5, mode: 'fail-once' }, { messageId: key('fails-once') });
        await completed('fails-once');
        await handled(2);
        expect(await runsOf('fails-once')).toBe(1);
        expect(consumer.logger.warnings).toContainEqual(expect.stringContaining('to be redelivered in 0.2 s'));
      });

      it(`resumes a redelivered message ${transactional ? 'anew (its steps rolled back with it)' : 'after the steps its failed delivery recorded'}`, async () => {
        await queue.publish('payout.requested', { amount: 5, mode: 'stepped' }, { messageId: key('stepped') });
        await completed('stepped');
        await handled(2);
        expect(await runsOf('stepped')).toBe(1);
        expect(await workRowsOf(db, `${key('stepped')}:reserve`)).toHaveLength(1);
        // Standard mode: the step was recorded, and the redelivery skipped it.
        expect(reserveRuns.get(key('stepped'))).toBe(transactional ? 2 : 1);
      });

      it('stores a final error, acknowledges it, and answers its redelivery with the same error', async () => {
        const client = await rabbitMqClient(queue);
        try {
          const send = () => request(client, 'payout.quote', { amount: 1, mode: 'final' }, key('final'));
          await expect(send()).rejects.toEqual({ reason: 'insufficient_funds' });
          expect(await statusOf(records, key('final'))).toBe('completed');
          await expect(send()).rejects.toEqual({ reason: 'insufficient_funds' });
          await handled(2);
        } finally {
          await client.close();
        }
      });

      it("takes a client's error (a ValidationPipe's 400) as final: stored, acknowledged, the same to each caller", async () => {
        await queue.publish('payout.requested', { amount: -1, mode: 'invalid' }, { messageId: key('invalid-event') });
        const client = await rabbitMqClient(queue);
        try {
          const send = () => request(client, 'payout.quote', { amount: -1, mode: 'invalid' }, key('invalid'));
          const refused = { statusCode: 400, message: 'amount must be positive', error: 'Bad Request' };
          await expect(send()).rejects.toEqual(refused);
          await expect(send()).rejects.toEqual(refused);
        } finally {
          await client.close();
        }
        await handled(3);
        expect(await statusOf(records, key('invalid-event'))).toBe('completed');
        expect(consumer.logger.warnings).toContainEqual(
          expect.stringContaining('failed for good (its error is final)'),
        );
        expect(consumer.logger.errors).toEqual([]);
      });

      it('dead-letters a message without a key, and one whose key was used with another payload', async () => {
        await queue.publish('payout.requested', { amount: 3 });
        await queue.publish('payout.requested', { amount: 3 }, { messageId: key('reused') });
        await completed('reused');
        await queue.publish('payout.requested', { amount: 4 }, { messageId: key('reused') });
        const dead = await waitFor(async () => {
          const taken = await queue.takeDeadLetters();
          return taken.length > 0 ? taken : undefined;
        }, 'dead letters');
        const more =
          dead.length < 2
            ? await waitFor(async () => {
                const taken = await queue.takeDeadLetters();
                return taken.length > 0 ? taken : undefined;
              }, 'the second dead letter')
            : [];
        expect([...dead, ...more].map(({ data }) => data)).toEqual(
          expect.arrayContaining([{ amount: 3 }, { amount: 4 }]),
        );
        expect(await runsOf('reused')).toBe(1);
      });

      it('holds a duplicate that arrives while the first delivery runs, and acknowledges it with the outcome', async () => {
        const gate = new Gate();
        gates.set(key('in-flight'), gate);
        await queue.publish('payout.requested', { amount: 7, mode: 'gated' }, { messageId: key('in-flight') });
        await gate.reached;
        await queue.publish('payout.requested', { amount: 7, mode: 'gated' }, { messageId: key('in-flight') });
        await waitFor(async () => ((await queue.ready()) === 0 ? true : undefined), 'the duplicate to be delivered');
        gate.release();
        await completed('in-flight');
        await handled(2);
        expect(await runsOf('in-flight')).toBe(1);
      });

      it('left no message unacknowledged: none comes back to the queue when the consumer closes', async () => {
        await consumer.close();
        expect(await queue.ready()).toBe(0);
      });
    });

    describe('standard mode, a redact hook that throws', () => {
      const queue = useTestQueue();
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 4 },
        idempotency: {
          singleTenant: true,
          redact: () => {
            throw new Error('the hook failed');
          },
        },
        controllers: [PayoutsConsumer],
      }));

      it('acknowledges the message and its redeliveries, run once, and answers a request and its retry withheld', async () => {
        await queue.publish('payout.requested', { amount: 4 }, { messageId: 'withheld-event' });
        const records = recordsOf(consumer, db);
        await waitFor(
          async () => ((await statusOf(records, 'withheld-event')) === 'completed' ? true : undefined),
          'stored',
        );
        await queue.publish('payout.requested', { amount: 4 }, { messageId: 'withheld-event' });
        const client = await rabbitMqClient(queue);
        try {
          const withheld = { code: 'idempotency_outcome_withheld', message: expect.stringContaining('withheld') };
          for (let call = 0; call < 2; call += 1) {
            await expect(request(client, 'payout.quote', { amount: 4 }, 'withheld-request')).rejects.toEqual(withheld);
          }
        } finally {
          await client.close();
        }
        await waitFor(async () => (consumer.handled.count >= 4 ? true : undefined), 'four deliveries handled');
        await consumer.close();
        expect(await workRowsOf(db, 'withheld-event')).toHaveLength(1);
        expect(await workRowsOf(db, 'withheld-request')).toHaveLength(1);
        expect(await queue.ready()).toBe(0);
        expect(await queue.takeDeadLetters()).toEqual([]);
        expect(consumer.logger.errors).toEqual([
          expect.stringContaining('The redact hook threw'),
          expect.stringContaining('The redact hook threw'),
        ]);
      });
    });

    // Transactional on PostgreSQL; on Redis, in standard mode, the second on the first one's records.
    describe('two consumers on one queue', () => {
      const queue = useTestQueue();
      const consumers: TestConsumer[] = [];

      beforeAll(async () => {
        for (let i = 0; i < 2; i += 1) {
          consumers.push(
            await startRabbitMqConsumer(
              {
                ...recordsOn(store, { keyPrefix: consumers[0]?.redis?.keyPrefix }),
                database: db,
                pool: { max: 4 },
                idempotency: { singleTenant: true, transactional: store === 'postgres', retryAfterSeconds: 0.2 },
                controllers: [PayoutsConsumer],
              },
              queue,
              { prefetchCount: 1 },
            ),
          );
        }
      });
      afterAll(() => Promise.all(consumers.map((consumer) => consumer.close())));

      it('runs a message once when its duplicate reaches the other consumer while the first runs', async () => {
        const gate = new Gate();
        gates.set('two-consumers', gate);
        await queue.publish('payout.requested', { amount: 9, mode: 'gated' }, { messageId: 'two-consumers' });
        await gate.reached;
        // The first consumer holds the first delivery (prefetch 1), so the broker hands the duplicate to the other.
        await queue.publish('payout.requested', { amount: 9, mode: 'gated' }, { messageId: 'two-consumers' });
        await waitFor(async () => ((await queue.ready()) === 0 ? true : undefined), 'the duplicate to be delivered');
        gate.release();
        const ended = () => consumers.reduce((sum, { handled }) => sum + handled.count, 0);
        await waitFor(async () => (ended() === 2 ? true : undefined), 'both deliveries handled');
        await Promise.all(consumers.map((consumer) => consumer.close()));
        expect(await queue.ready()).toBe(0);
        expect(await workRowsOf(db, 'two-consumers')).toHaveLength(1);
      });
    });

    describe('keys from a function, and messages without one run unguarded', () => {
      const queue = useTestQueue();
      const consumer = useRabbitMqConsumer(
        queue,
        () => ({
          ...recordsOn(store),
          database: db,
          pool: { max: 4 },
          idempotency: { singleTenant: true },
          controllers: [PayoutsConsumer],
        }),
        { key: (payload) => (payload as { payoutId?: string }).payoutId, withoutKey: 'run' },
      );

      it('takes the key from the payload, and runs a message without one with a warning, acknowledged', async () => {
        await queue.publish('payout.requested', { amount: 2, payoutId: 'from-payload' });
        await queue.publish('payout.requested', { amount: 2, payoutId: 'from-payload' });
        await queue.publish('payout.requested', { amount: 2 });
        await waitFor(async () => (consumer.handled.count === 3 ? true : undefined), 'the three deliveries handled');
        expect(await workRowsOf(db, 'unguarded')).toHaveLength(1);
        expect(await workRowsOf(db, 'from-payload')).toHaveLength(1);
        expect(consumer.logger.warnings).toContainEqual(expect.stringContaining("run unguarded (withoutKey: 'run')"));
      });

      it('dead-letters a message whose key the function cannot give', async () => {
        await queue.publish('payout.requested', { amount: 2, payoutId: 42 });
        const dead = await waitFor(async () => {
          const taken = await queue.takeDeadLetters();
          return taken.length > 0 ? taken : undefined;
        }, 'the dead letter');
        expect(dead).toEqual([{ pattern: 'payout.requested', data: { amount: 2, payoutId: 42 } }]);
        expect(consumer.logger.warnings).toContainEqual(
          expect.stringContaining('the key function returned the number 42, not a string'),
        );
      });

      it('left no message unacknowledged', async () => {
        await consumer.close();
        expect(await queue.ready()).toBe(0);
      });
    });

    describe('in a hybrid application', () => {
      const queue = useTestQueue();
      // A queue of its own for a controller of its own: a message no handler has is dead-lettered by Nest.
      const classLevelQueue = useTestQueue();
      const startHybrid = (inheritAppConfig: boolean, controllers: Type[] = [PayoutsConsumer], consumed = queue) =>
        startTestApp({
          ...recordsOn(store),
          database: db,
          pool: { max: 3 },
          idempotency: { singleTenant: true },
          controllers,
          imports: [IdempotencyRabbitMQModule.forRoot()],
          listen: false,
          configure: async (app) => {
            app.connectMicroservice<MicroserviceOptions>(
              {
                transport: Transport.RMQ,
                options: {
                  urls: [RABBITMQ_URL],
                  queue: consumed.name,
                  queueOptions: consumed.queueOptions,
                  noAck: false,
                },
              },
              { inheritAppConfig },
            );
            await app.startAllMicroservices();
          },
        });

      it('refuses to run a message the module did not claim (connected without inheritAppConfig), naming the fix', async () => {
        const hybrid = await startHybrid(false);
        try {
          await queue.publish('payout.requested', { amount: 8 }, { messageId: 'hybrid' });
          await waitFor(async () => (hybrid.logger.errors.length > 0 ? true : undefined), 'the refusal');
          expect(hybrid.logger.errors[0]).toContain('connectMicroservice(options, { inheritAppConfig: true })');
          expect(await workRowsOf(db, 'hybrid')).toHaveLength(0);
        } finally {
          await hybrid.close();
        }
      });

      it('refuses it too for a controller marked @Idempotent() on its class', async () => {
        const ran: string[] = [];
        @Idempotent()
        @Controller()
        class ClassLevelConsumer {
          @EventPattern('class.level')
          handle(@Payload() payload: { id: string }): void {
            ran.push(payload.id);
          }
        }
        const hybrid = await startHybrid(false, [ClassLevelConsumer], classLevelQueue);
        try {
          await classLevelQueue.publish('class.level', { id: 'class-level' }, { messageId: 'class-level' });
          await waitFor(async () => (hybrid.logger.errors.length > 0 ? true : undefined), 'the refusal');
          expect(hybrid.logger.errors[0]).toContain('ClassLevelConsumer.handle was called without');
          expect(ran).toEqual([]);
        } finally {
          await hybrid.close();
        }
      });

      it('runs it once connected with inheritAppConfig: true, and acknowledges it', async () => {
        const hybrid = await startHybrid(true);
        try {
          const records = recordsOf(hybrid, db);
          await waitFor(async () => ((await statusOf(records, 'hybrid')) === 'completed' ? true : undefined), 'stored');
          expect(await workRowsOf(db, 'hybrid')).toHaveLength(1);
        } finally {
          await hybrid.close();
        }
        expect(await queue.ready()).toBe(0);
      });
    });
  });
});
