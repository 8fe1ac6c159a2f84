/**
 * Where a message's idempotency key is: a property of the message the broker carries (AMQP's `messageId`), one of
 * its headers (JetStream's `Nats-Msg-Id`, or a header of the application's), or a function of its payload and its
 * Nest context (`RmqContext`, `JetStreamContext`) that returns the key, or `undefined` when the message has none.
 */
export type MessageKeySource<Context = unknown> =
  { property: string } | { header: string } | ((payload: unknown, context: Context) => string | undefined);

/** Options of a message consumer transport (`IdempotencyRabbitMQModule.forRoot()`, `IdempotencyJetStreamModule`). */
export interface MessageConsumerOptions<Context = unknown> {
  /** Where a message's key is. Default: the broker's message id (RabbitMQ: `{ property: 'messageId' }`). */
  key?: MessageKeySource<Context>;
  /**
   * What happens to a message without a key: `'reject'` it, without running its handler, so that the broker
   * dead-letters it (where the queue has a dead-letter target; otherwise it is dropped), or `'run'` its handler
   * unguarded, with a warning (once per pattern). Default: `'reject'`.
   */
  withoutKey?: 'reject' | 'run';
  /**
   * Whether an error a handler throws is its final outcome: stored (a redelivery gets it again without running the
   * handler; a request-response caller gets the same error) and the message acknowledged. Any other error releases
   * the claim and the message is redelivered after `retryAfterSeconds`, counting toward the broker's delivery
   * limit. Default: `isFinalErrorByDefault`, an `RpcException` (how a handler answers its caller with an error) and
   * an `HttpException` of a client's error (a `ValidationPipe`'s 400), but 408, 425 and 429, are final; others are
   * not.
   */
  isFinalError?: (error: unknown) => boolean;
  /**
   * How long the consumer holds a message that cannot be claimed now but may be later (the store unavailable, or out
   * of transaction slots; its key in progress in another attempt; shutdown's drain), unsettled, claiming it again
   * after a pause that doubles from `retryAfterSeconds` up to 10 s, before it gives it back to the broker, which
   * counts a delivery toward the queue's limit. A message is never given back for what is not its own fault within
   * this bound: size it for the longest store outage to ride out, and below what the broker allows a message to stay
   * unsettled (RabbitMQ's `consumer_timeout`, 30 minutes by default; `JetStreamServer` tells JetStream the message is
   * being worked on). Default: 600 (10 minutes).
   */
  holdSeconds?: number;
  /**
   * Messages claimed and run at once by this process; the others delivered wait their turn, unsettled, rather than
   * be refused. Default: the store's `capacity` (the PostgreSQL store: its pool's size less two, 8 with TypeORM's
   * default pool of 10), or 10. Set the broker's prefetch near it (RabbitMQ's `prefetchCount`, `JetStreamServer`'s
   * `maxInFlight`), so that a backlog waits in the broker.
   */
  concurrency?: number;
}
