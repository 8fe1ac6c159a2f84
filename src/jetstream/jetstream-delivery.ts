import type { JsMsg } from '@nats-io/jetstream';
import type { MessageConsumer, MessageDelivery } from '../messages/message-delivery.interface.js';

/**
 * A JetStream message's settlement: `ack()`, `nak(delay)` (redelivered after the delay, counting toward the
 * consumer's `max_deliver`) and `term()` (never redelivered; JetStream publishes a terminated advisory). JetStream
 * messages have headers, not properties. It also tells when it was given back, which ends its delivery's wait: a
 * request given back has no reply from this delivery.
 */
export class JetStreamDelivery implements MessageDelivery {
  private giveBack!: () => void;
  private acksOnReply = false;
  readonly givenBack = new Promise<void>((resolve) => (this.giveBack = resolve));

  constructor(
    private readonly message: JsMsg,
    /** The server's pulls, which shutdown's drain stops. */
    readonly consumer: MessageConsumer,
  ) {}

  get deliveries(): number {
    return this.message.info.deliveryCount;
  }

  property(): undefined {
    return undefined;
  }

  header(name: string): string | undefined {
    // MsgHdrs.get() answers '' for a header the message does not have.
    return this.message.headers?.get(name) || undefined;
  }

  /**
   * A plain ack, not `ackAck()`: the outcome is stored before the ack, so an ack JetStream never got costs a
   * redelivery that the record answers without running the handler; waiting for its confirmation would cost every
   * message a round trip and protect nothing.
   */
  ack(): void {
    this.message.ack();
  }

  /** `JetStreamServer` publishes the reply, then calls `replied()`, which acknowledges. */
  ackAfterReply(): void {
    this.acksOnReply = true;
  }

  /** The reply to the request was sent (or it has none): an acknowledgement deferred to it goes out now. */
  replied(): void {
    if (this.acksOnReply) this.message.ack();
  }

  retryLater(delayMs: number): void {
    this.message.nak(delayMs > 0 ? delayMs : undefined);
    this.giveBack();
  }

  reject(): void {
    this.message.term();
  }
}
