import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import amqp from 'amqplib';
import type { RunningApp } from '../test/support/sample-app.js';
import type { ConsumerRun } from './consumer-app.js';

/** The consumer rows' names begin with it (`RabbitMQ consumer: baseline @64`). */
export const CONSUMER_NAME = 'RabbitMQ consumer';

/** The broker of the consumer rows: `RABBITMQ_URL`, by default the one beside PostgreSQL on this machine. */
export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';

/** Why the consumer rows cannot be measured (RabbitMQ not reachable), or undefined. */
export async function rabbitMqUnavailable(): Promise<string | undefined> {
  try {
    const connection = await amqp.connect(RABBITMQ_URL, { timeout: 3_000 });
    await connection.close();
    return undefined;
  } catch (error) {
    return `RabbitMQ cannot be reached at ${new URL(RABBITMQ_URL).host} (RABBITMQ_URL): ${(error as Error).message}`;
  }
}

/**
 * The run's quorum queue (fresh, deleted at the end), which the consumer app consumes, and the publisher of its
 * batches: Nest's RabbitMQ event format (`{ pattern, data }`), persistent, each with its AMQP `messageId`, on a
 * confirm channel.
 */
export interface BenchQueue {
  name: string;
  /** Publishes one event to `pattern` per message id, and waits for the broker's confirms. */
  publish(pattern: string, messageIds: string[]): Promise<void>;
  delete(): Promise<void>;
}

export async function openBenchQueue(): Promise<BenchQueue> {
  const name = `idempotency_bench_${randomBytes(6).toString('hex')}`;
  const connection = await amqp.connect(RABBITMQ_URL);
  const channel = await connection.createConfirmChannel();
  // The same arguments as the consumer app's (Nest's server asserts the queue with them).
  await channel.assertQueue(name, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
  return {
    name,
    async publish(pattern, messageIds) {
      for (const messageId of messageIds) {
        const content = Buffer.from(JSON.stringify({ pattern, data: { amount: 1200 } }));
        if (!channel.sendToQueue(name, content, { persistent: true, messageId })) await once(channel, 'drain');
      }
      await channel.waitForConfirms();
    },
    async delete() {
      await channel.deleteQueue(name);
      await connection.close();
    },
  };
}

/** `count` message ids: new ones, or the replayed ones (`replay-consumer-<n>`, completed by the seeding). */
export const messageIds = (count: number, keys: 'new' | 'completed') =>
  Array.from({ length: count }, (_, i) => (keys === 'new' ? randomUUID() : `replay-consumer-${i}`));

/**
 * One batch, published (`BenchQueue.publish`) while the consumer app holds its deliveries at its gate: the gate
 * opened, and the time taken until `messages` were settled, as the consumer app measured it.
 */
export async function consumeBatch(app: RunningApp, messages: number): Promise<ConsumerRun> {
  const response = await fetch(`${app.url}/run?messages=${messages}`, {
    method: 'POST',
    signal: AbortSignal.timeout(120_000),
  });
  if (!response.ok) throw new Error(`The consumer app refused a run: ${response.status} ${await response.text()}`);
  return (await response.json()) as ConsumerRun;
}
