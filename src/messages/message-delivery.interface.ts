/** The broker's consumer a message came from, which shutdown's drain stops from taking more. */
export interface MessageConsumer {
  /**
   * Stops taking messages from the broker (RabbitMQ: cancels the consumer; JetStream: stops pulling); the messages
   * already delivered stay in hand, to be run and settled. Resolves once no more can arrive (RabbitMQ's confirmation of
   * the cancel; the last pull's end). Calls after the first resolve with the first.
   */
  stop(): Promise<void>;
}

/**
 * One delivery of a message, as its broker's transport sees it: where its key may be, and how it is settled. The
 * message transport settles each delivery once, after its outcome is stored or its claim released.
 */
export interface MessageDelivery {
  /** A property of the message (AMQP's `messageId`), as text; `undefined` when it has none. */
  property(name: string): string | undefined;
  /** A header of the message, as text; `undefined` when it has none. */
  header(name: string): string | undefined;
  /** How often the broker has delivered the message, this delivery included (1 the first time). */
  readonly deliveries: number;
  /** The consumer it came from. */
  readonly consumer: MessageConsumer;
  /** Done with: the broker forgets it. */
  ack(): void;
  /**
   * Done with, once the reply to this request is sent: a crash between the two leaves the request to be redelivered
   * (and answered again from its record), rather than acknowledged without a reply.
   */
  ackAfterReply(): void;
  /** Not done: the broker delivers it again after `delayMs` (to this consumer or another), counting the delivery. */
  retryLater(delayMs: number): void;
  /** Never to be done: the broker dead-letters it (or drops it without a dead-letter target), and never redelivers it. */
  reject(): void;
}
