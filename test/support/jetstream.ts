import { randomBytes } from 'node:crypto';
import { jetstream, jetstreamManager, type PubAck } from '@nats-io/jetstream';
import { connect, createInbox, type NatsConnection } from '@nats-io/transport-node';
import {
  IdempotencyJetStreamModule,
  type IdempotencyJetStreamOptions,
  JetStreamClient,
  type JetStreamServerOptions,
  JetStreamServer,
  REPLY_TO_HEADER,
} from '../../src/jetstream/index.js';
import { startConsumerApp, type TestConsumer } from './consumer-app.js';
import type { TestModuleOptions } from './test-app.js';
import { madeBeforeAll } from './made-before-all.js';
import { requireService } from './required-service.js';
import { waitFor } from './wait-for.js';

/** The NATS server of the suites on JetStream: `NATS_URL`, by default the one that runs beside PostgreSQL here and in CI. */
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

export const natsJetStream = await requireService('NATS JetStream', async () => {
  try {
    const connection = await connect({ servers: NATS_URL, timeout: 3_000, reconnect: false });
    try {
      await (await jetstreamManager(connection)).getAccountInfo();
    } finally {
      await connection.close();
    }
    return undefined;
  } catch (error) {
    return `NATS with JetStream cannot be reached at ${NATS_URL} (set NATS_URL): ${(error as Error).message}`;
  }
});

/**
 * A stream of the test file's own (of the block's, `name`), on subjects under `prefix` (`<prefix>.>`: blocks on the
 * same subjects each make their stream in turn), with a short duplicate window so that
 * a test can publish a message again under the same `Nats-Msg-Id` and have the stream keep it, and what a test reads
 * of its consumers: their pending messages and the advisories of the messages they terminated.
 */
export interface TestStream {
  name: string;
  /** Publishes an event (JSON payload; `msgId` as `Nats-Msg-Id`); with `again`, until the stream stores it anew. */
  publish(subject: string, data: unknown, options?: { msgId?: string; again?: boolean }): Promise<PubAck>;
  /** Publishes bytes as they are (not JSON, say). */
  publishBytes(subject: string, data: Uint8Array): Promise<PubAck>;
  /** Sends a request with a new inbox in `Nest-Reply-To`, and returns its reply's bytes. */
  request(subject: string, data: unknown, msgId: string): Promise<Buffer>;
  /** Messages of `durable` not yet delivered, and delivered and not yet acknowledged. */
  stateOf(durable: string): Promise<{ undelivered: number; unacknowledged: number }>;
  /** Waits until `durable` has no message left to deliver or to acknowledge. */
  allSettled(durable: string): Promise<void>;
  /** Stream sequences of the messages `durable` terminated, as JetStream's advisories told them. */
  terminated(durable: string): number[];
  /** Stream sequences of the messages `durable` gave up on past its `max_deliver`, as JetStream's advisories told them. */
  pastMaxDeliver(durable: string): number[];
  client: JetStreamClient;
}

export function useTestStream(prefix: string, name: string): TestStream {
  return madeBeforeAll(
    async () => {
      const connection = await connect({ servers: NATS_URL });
      const manager = await jetstreamManager(connection);
      // 100 ms: the stream drops a copy published within it, as it would a publisher's retry.
      await manager.streams.add({ name, subjects: [`${prefix}.>`], duplicate_window: 100_000_000 });
      const client = new JetStreamClient(connection);
      const advised = (advisory: string) => {
        const sequences = new Map<string, number[]>();
        connection.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.${advisory}.${name}.*`, {
          callback: (_error, message) => {
            const { consumer, stream_seq } = message.json<{ consumer: string; stream_seq: number }>();
            sequences.set(consumer, [...(sequences.get(consumer) ?? []), stream_seq]);
          },
        });
        return (durable: string) => sequences.get(durable) ?? [];
      };
      const terminated = advised('MSG_TERMINATED');
      const pastMaxDeliver = advised('MAX_DELIVERIES');
      await connection.flush();
      return {
        name,
        connection,
        manager,
        client,
        async publish(
          subject: string,
          data: unknown,
          { msgId, again = false }: { msgId?: string; again?: boolean } = {},
        ) {
          if (!again) return client.emit(subject, data, { msgId });
          return waitFor(async () => {
            const stored = await client.emit(subject, data, { msgId });
            return stored.duplicate ? undefined : stored;
          }, `the stream to store ${msgId} again`);
        },
        publishBytes: (subject: string, data: Uint8Array) => jetstream(connection).publish(subject, data),
        request: (subject: string, data: unknown, msgId: string) =>
          rawRequest(connection, client, subject, data, msgId),
        async stateOf(durable: string) {
          const info = await manager.consumers.info(name, durable);
          return { undelivered: info.num_pending, unacknowledged: info.num_ack_pending };
        },
        async allSettled(durable: string) {
          await waitFor(async () => {
            const info = await manager.consumers.info(name, durable);
            return info.num_pending + info.num_ack_pending === 0 ? true : undefined;
          }, `${durable} to settle every message`);
        },
        terminated,
        pastMaxDeliver,
      };
    },
    async ({ manager, connection, name }) => {
      await manager.streams.delete(name);
      await connection.close();
    },
  );
}

/**
 * A request on the wire: its payload published to the stream with `Nats-Msg-Id` and `Nest-Reply-To` headers, its
 * reply's bytes read off the inbox; published until the stream stores it (a copy within the duplicate window is
 * dropped, and would get no reply).
 */
async function rawRequest(
  connection: NatsConnection,
  client: JetStreamClient,
  subject: string,
  data: unknown,
  msgId: string,
): Promise<Buffer> {
  const inbox = createInbox();
  const replies = connection.subscribe(inbox, { max: 1, timeout: 15_000 });
  await waitFor(async () => {
    const stored = await client.emit(subject, data, { msgId, headers: { [REPLY_TO_HEADER]: inbox } });
    return stored.duplicate ? undefined : stored;
  }, `the stream to store the request ${msgId}`);
  for await (const reply of replies) return Buffer.from(reply.data);
  throw new Error(`no reply to ${msgId}`);
}

/** A consumer app: the test module of `options` with `IdempotencyJetStreamModule`, on a `JetStreamServer`. */
export function startJetStreamConsumer(
  options: TestModuleOptions,
  server: Omit<JetStreamServerOptions, 'servers'>,
  transportOptions: IdempotencyJetStreamOptions = {},
): Promise<TestConsumer> {
  return startConsumerApp(
    options,
    IdempotencyJetStreamModule.forRoot(transportOptions),
    new JetStreamServer({ servers: NATS_URL, ...server }),
  );
}

/** A prefix of subjects, and the stream's name, unique to this run of a test file. */
export const uniquePrefix = () => `idempotency_test_${randomBytes(6).toString('hex')}`;
