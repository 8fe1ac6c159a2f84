/**
 * Where a message's idempotency key is: a property of the message the broker carries (AMQP's `messageId`), one of
 * its headers (JetStream's `Nats-Msg-Id`, or a header of the application's), or a function of its payload and its
 * Nest context (`RmqContext`, `JetStreamContext`) that returns the key, or `undefined` when the message has none.
 */
export type MessageKeySource<Context = unknown> =
  { property: string } | { header: string } | ((payload: unknown, context: Context) => string | undefined);

/** Options of a message consumer transport (`IdempotencyRabbitMqModule.forRoot()`, `IdempotencyJetStreamModule`). */
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
}
