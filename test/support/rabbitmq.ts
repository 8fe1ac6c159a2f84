import { randomBytes } from 'node:crypto';
import { ClientRMQ, RmqRecordBuilder, ServerRMQ } from '@nestjs/microservices';
import amqp from 'amqplib';
import { firstValueFrom } from 'rxjs';
import { IdempotencyRabbitMQModule, type IdempotencyRabbitMQOptions } from '../../src/rabbitmq/index.js';
import { startConsumerApp, type TestConsumer } from './consumer-app.js';
import type { TestModuleOptions } from './test-app.js';
import { madeBeforeAll } from './made-before-all.js';
import { requireService } from './required-service.js';

/** The broker of the suites on RabbitMQ: `RABBITMQ_URL`, by default the one that runs beside PostgreSQL here and in CI. */
export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

export const rabbitmq = await requireService('RabbitMQ', async () => {
  try {
    const connection = await amqp.connect(RABBITMQ_URL, { timeout: 3_000 });
    await connection.close();
    return undefined;
  } catch (error) {
    return `RabbitMQ cannot be reached at ${RABBITMQ_URL} (set RABBITMQ_URL): ${(error as Error).message}`;
  }
});

/**
 * A quorum queue of the test file's own, with its dead-letter queue: what a consumer of the module's is meant to
 * consume (a quorum queue counts deliveries, and dead-letters a message past `x-delivery-limit` or rejected). Nest's
 * server asserts the queue with `queueOptions`, which must match these arguments.
 */
export interface TestQueue {
  name: string;
  deadLetters: string;
  queueOptions: { durable: true; arguments: Record<string, unknown> };
  /** Publishes a message as Nest's RabbitMQ client would an event: `{ pattern, data }`, with AMQP `properties`. */
  publish(pattern: string | object, data: unknown, properties?: amqp.Options.Publish): Promise<void>;
  /** Publishes many such messages, confirmed together. */
  publishAll(
    messages: Array<{ pattern: string | object; data: unknown; properties?: amqp.Options.Publish }>,
  ): Promise<void>;
  /** Messages ready in the queue (not delivered, or given back and not yet redelivered). */
  ready(): Promise<number>;
  /** The payloads of the messages dead-lettered so far, taken off the dead-letter queue. */
  takeDeadLetters(): Promise<Array<{ pattern: string; data: unknown }>>;
}

export function useTestQueue(deliveryLimit = 5): TestQueue {
  return madeBeforeAll(
    async () => {
      const name = `idempotency_test_${randomBytes(6).toString('hex')}`;
      const deadLetters = `${name}_dead`;
      const queueOptions = {
        durable: true as const,
        arguments: {
          'x-queue-type': 'quorum',
          'x-delivery-limit': deliveryLimit,
          'x-dead-letter-exchange': '',
          'x-dead-letter-routing-key': deadLetters,
        },
      };
      const connection = await amqp.connect(RABBITMQ_URL);
      const channel = await connection.createConfirmChannel();
      await channel.assertQueue(deadLetters, { durable: true });
      await channel.assertQueue(name, queueOptions);
      const publishAll = async (
        messages: Array<{ pattern: string | object; data: unknown; properties?: amqp.Options.Publish }>,
      ) => {
        for (const { pattern, data, properties } of messages) {
          channel.sendToQueue(name, Buffer.from(JSON.stringify({ pattern, data })), {
            persistent: true,
            ...properties,
          });
        }
        await channel.waitForConfirms();
      };
      return {
        name,
        deadLetters,
        queueOptions,
        connection,
        channel,
        publish: (pattern: string | object, data: unknown, properties: amqp.Options.Publish = {}) =>
          publishAll([{ pattern, data, properties }]),
        publishAll,
        async ready() {
          return (await channel.checkQueue(name)).messageCount;
        },
        async takeDeadLetters() {
          const taken: Array<{ pattern: string; data: unknown }> = [];
          for (let message = await channel.get(deadLetters, { noAck: true }); message;) {
            taken.push(JSON.parse(message.content.toString()) as { pattern: string; data: unknown });
            message = await channel.get(deadLetters, { noAck: true });
          }
          return taken;
        },
      };
    },
    async ({ channel, connection, name, deadLetters }) => {
      await channel.deleteQueue(name);
      await channel.deleteQueue(deadLetters);
      await connection.close();
    },
  );
}

/** A consumer of `queue`: the test module of `options` with `IdempotencyRabbitMQModule`, on Nest's RabbitMQ server. */
export function startRabbitMqConsumer(
  options: TestModuleOptions,
  queue: TestQueue,
  consumerOptions: IdempotencyRabbitMQOptions & { prefetchCount?: number } = {},
): Promise<TestConsumer> {
  const { prefetchCount = 10, ...transportOptions } = consumerOptions;
  const server = new ServerRMQ({
    urls: [RABBITMQ_URL],
    queue: queue.name,
    queueOptions: queue.queueOptions,
    noAck: false,
    prefetchCount,
  });
  return startConsumerApp(options, IdempotencyRabbitMQModule.forRoot(transportOptions), server);
}

/** `startRabbitMqConsumer` for the block's tests: started in a `beforeAll` (`options` read then), closed after them. */
export function useRabbitMqConsumer(
  queue: TestQueue,
  options: () => TestModuleOptions,
  consumerOptions?: Parameters<typeof startRabbitMqConsumer>[2],
): TestConsumer {
  return madeBeforeAll(
    () => startRabbitMqConsumer(options(), queue, consumerOptions),
    (consumer) => consumer.close(),
  );
}

/** Nest's RabbitMQ client on `queue`, for requests (`send`) whose replies come back on its reply queue. */
export async function rabbitMqClient(queue: TestQueue): Promise<ClientRMQ> {
  const client = new ClientRMQ({ urls: [RABBITMQ_URL], queue: queue.name, queueOptions: queue.queueOptions });
  await client.connect();
  return client;
}

/** Sends a request of `pattern` with its AMQP `messageId` (the module's key), and resolves to its reply. */
export function request(client: ClientRMQ, pattern: string, data: unknown, messageId: string): Promise<unknown> {
  return firstValueFrom(client.send(pattern, new RmqRecordBuilder(data).setOptions({ messageId }).build()));
}
