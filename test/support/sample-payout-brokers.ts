import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { ClientRMQ, RmqRecordBuilder } from '@nestjs/microservices';
import amqp from 'amqplib';
import { firstValueFrom, lastValueFrom } from 'rxjs';
import { deadLettersOf, payoutQueueOptions } from '../../sample-app/brokers/rabbitmq-payouts.js';
import { JetStreamClient } from '../../src/jetstream/index.js';
import { NATS_URL, natsJetStream } from './jetstream.js';
import { RABBITMQ_URL, rabbitmq } from './rabbitmq.js';
import type { RequiredService } from './required-service.js';

/**
 * A broker the sample app consumes payout requests from, as a test drives it: `open()` gives a test a destination of
 * its own (a queue, a stream), the app's environment to consume it, and a publisher to it.
 */
export interface SamplePayoutBroker {
  /** The transport's name, as the idempotency records' scopes say it (`<name> <pattern> <Consumer.method>`). */
  name: 'rabbitmq' | 'jetstream';
  service: RequiredService;
  open(): Promise<PayoutDestination>;
}

export interface PayoutDestination {
  /** What the sample app's process needs to consume this destination. */
  env: Record<string, string>;
  /** Publishes an event with `key` as its message id; resolves once the broker has it. */
  emit(pattern: string, payload: unknown, key: string): Promise<void>;
  /** Sends a request with `key` as its message id; resolves with the reply, however many deliveries it takes. */
  send(pattern: string, payload: unknown, key: string): Promise<unknown>;
  /** Messages neither acknowledged nor dead: waiting, delivered and unsettled, or dead-lettered. */
  unsettled(): Promise<number>;
  /** Deletes the destination, and closes the publisher. */
  close(): Promise<void>;
}

const uniqueSuffix = () => randomBytes(6).toString('hex');

/** A quorum queue of the test's own, as the app declares it (with its dead-letter queue), on Nest's RabbitMQ client. */
const rabbitMqPayouts: SamplePayoutBroker = {
  name: 'rabbitmq',
  service: rabbitmq,
  async open() {
    const queue = `sample_payouts_crash_${uniqueSuffix()}`;
    const broker = await amqp.connect(RABBITMQ_URL);
    const channel = await broker.createChannel();
    const client = new ClientRMQ({ urls: [RABBITMQ_URL], queue, queueOptions: payoutQueueOptions(queue) });
    await client.connect();
    const record = (payload: unknown, key: string) =>
      new RmqRecordBuilder(payload).setOptions({ messageId: key, persistent: true }).build();
    return {
      env: { RABBITMQ_URL, PAYOUT_QUEUE: queue },
      emit: (pattern, payload, key) =>
        lastValueFrom(client.emit(pattern, record(payload, key)), { defaultValue: undefined }).then(() => undefined),
      send: (pattern, payload, key) => firstValueFrom(client.send(pattern, record(payload, key))),
      async unsettled() {
        const [ready, dead] = await Promise.all([channel.checkQueue(queue), channel.checkQueue(deadLettersOf(queue))]);
        return ready.messageCount + dead.messageCount;
      },
      async close() {
        await client.close();
        await channel.deleteQueue(queue);
        await channel.deleteQueue(deadLettersOf(queue));
        await broker.close();
      },
    };
  },
};

/**
 * A stream of the test's own, which the app provisions (on the sample's subjects: one such stream at a time), with an
 * ack wait of `ACK_WAIT_SECONDS`: JetStream redelivers an unacknowledged message only after it, so a short one keeps
 * the test quick.
 */
const ACK_WAIT_SECONDS = 2;
/** A request's caller waits this long for its reply: the kill, the restart and the redelivery. */
const REPLY_TIMEOUT_MS = 60_000;

const jetStreamPayouts: SamplePayoutBroker = {
  name: 'jetstream',
  service: natsJetStream,
  async open() {
    const stream = `SAMPLE_PAYOUTS_CRASH_${uniqueSuffix()}`;
    const durable = 'sample-payouts';
    const connection = await connect({ servers: NATS_URL });
    const manager = await jetstreamManager(connection);
    const client = new JetStreamClient(connection);
    return {
      env: { NATS_URL, PAYOUT_STREAM: stream, PAYOUT_DURABLE: durable, PAYOUT_ACK_WAIT_SECONDS: `${ACK_WAIT_SECONDS}` },
      emit: (pattern, payload, key) => client.emit(pattern, payload, { msgId: key }).then(() => undefined),
      send: (pattern, payload, key) => client.send(pattern, payload, { msgId: key, timeoutMs: REPLY_TIMEOUT_MS }),
      async unsettled() {
        const info = await manager.consumers.info(stream, durable);
        return info.num_pending + info.num_ack_pending;
      },
      async close() {
        // The app made it (and then only if it started): nothing to delete otherwise.
        await manager.streams.delete(stream).catch(() => undefined);
        await connection.close();
      },
    };
  },
};

export const SAMPLE_PAYOUT_BROKERS: SamplePayoutBroker[] = [rabbitMqPayouts, jetStreamPayouts];
