import type { NodeConnectionOptions } from '@nats-io/transport-node';
import type { StreamConfig } from '@nats-io/jetstream';

/** Options of `JetStreamServer`: the connection, the durable consumer it pulls from, and how much it runs at once. */
export interface JetStreamServerOptions {
  /** NATS servers. Default: `nats://127.0.0.1:4222`. */
  servers?: string | string[];
  /** More options of the connection (`name`, `user`, `pass`, `token`, `authenticator`, `tls`, ...). */
  connection?: Omit<NodeConnectionOptions, 'servers'>;
  /** The stream the consumer reads. */
  stream: string;
  /** The durable pull consumer's name: instances that share it share its messages, each delivered to one. */
  durable: string;
  /**
   * The subjects the consumer delivers (its `filter_subjects`), and the stream's subjects when it is created here.
   * Default: the stream's subjects, all of them.
   */
  subjects?: string[];
  /**
   * Whether to create (or update) what the consumer needs at start-up: `'none'` (both exist, managed elsewhere),
   * `'consumer'` (the stream exists), or `'stream-and-consumer'`. Default: `'none'`.
   */
  provision?: 'none' | 'consumer' | 'stream-and-consumer';
  /** More settings of the stream created with `provision: 'stream-and-consumer'` (`duplicate_window`, `storage`, ...). */
  streamConfig?: Partial<StreamConfig>;
  /**
   * A provisioned consumer's `ack_wait`: how long a delivery may go unsettled before JetStream delivers it again.
   * The server tells JetStream that a message still runs (`working()`) every half of it while its handler runs, so
   * that a long handler is not redelivered meanwhile. Default: 30.
   */
  ackWaitSeconds?: number;
  /** A provisioned consumer's `max_deliver`: deliveries of a message before JetStream stops delivering it. Default: 5. */
  maxDeliver?: number;
  /**
   * A provisioned consumer's `backoff`, in seconds: each delivery's ack wait in turn, the last for the deliveries
   * after (JetStream then takes the first as `ack_wait`, in place of `ackWaitSeconds`); fewer entries than
   * `maxDeliver`. Default: none (every delivery's is `ackWaitSeconds`).
   */
  backoffSeconds?: number[];
  /** Messages handled at once by this instance (pulled only while there is room for them). Default: 10. */
  maxInFlight?: number;
  /** How long `close()` lets the handlers in flight finish before it drains the connection. Default: 10 000 ms. */
  closeTimeoutMs?: number;
}
