import type { RmqContext } from '@nestjs/microservices';
import type { MessageConsumer, MessageDelivery } from '../messages/message-delivery.interface.js';

/** The fields of amqplib's message that a delivery reads and settles by. */
interface AmqpMessage {
  fields: { redelivered: boolean; consumerTag: string };
  properties: Record<string, unknown> & { headers?: Record<string, unknown> };
}

/** The channel methods that settle a message (amqplib's, on the channel Nest's server consumes from). */
interface AmqpChannel {
  ack(message: AmqpMessage): void;
  nack(message: AmqpMessage, allUpTo?: boolean, requeue?: boolean): void;
  cancel(consumerTag: string): Promise<unknown>;
}

/** The consumers seen, one handle each, by channel and consumer tag: stopping one cancels it once. */
const consumers = new WeakMap<AmqpChannel, Map<string, MessageConsumer>>();

/**
 * The consumer a message came on (Nest's server consumes its queue with one consumer per channel). Stopping it sends
 * `basic.cancel`: RabbitMQ delivers nothing more to it, and the messages it delivered stay unacknowledged on the
 * channel, to be settled there (a closed channel would give them back, which a quorum queue counts as a delivery).
 */
function consumerOf(channel: AmqpChannel, consumerTag: string): MessageConsumer {
  let byTag = consumers.get(channel);
  if (!byTag) consumers.set(channel, (byTag = new Map<string, MessageConsumer>()));
  let consumer = byTag.get(consumerTag);
  if (!consumer) {
    let stopped: Promise<void> | undefined;
    const cancel = async () => {
      // A channel closed meanwhile has no consumer left to cancel (amqplib throws, or rejects).
      await channel.cancel(consumerTag);
    };
    consumer = { stop: () => (stopped ??= cancel().catch(() => undefined)) };
    byTag.set(consumerTag, consumer);
  }
  return consumer;
}

/**
 * A message of Nest's RabbitMQ server (`Transport.RMQ` with `noAck: false`), settled on the channel it came on. A
 * message given back is requeued (`nack` with requeue), which a quorum queue counts toward its `delivery-limit`;
 * the delay before it is kept here, on an unreferenced timer: RabbitMQ has no delayed requeue, and a process that
 * exits meanwhile leaves the message unacknowledged, which the broker redelivers all the same.
 */
export class RabbitMQDelivery implements MessageDelivery {
  private readonly message: AmqpMessage;
  private readonly channel: AmqpChannel;

  constructor(context: RmqContext) {
    this.message = context.getMessage() as AmqpMessage;
    this.channel = context.getChannelRef() as AmqpChannel;
  }

  get consumer(): MessageConsumer {
    return consumerOf(this.channel, this.message.fields.consumerTag);
  }

  /** A quorum queue counts the deliveries before this one in `x-delivery-count`; a classic queue only flags a redelivery. */
  get deliveries(): number {
    const before = this.message.properties.headers?.['x-delivery-count'];
    if (typeof before === 'number') return before + 1;
    return this.message.fields.redelivered ? 2 : 1;
  }

  property(name: string): string | undefined {
    return textOf(this.message.properties[name]);
  }

  header(name: string): string | undefined {
    return textOf(this.message.properties.headers?.[name]);
  }

  ack(): void {
    this.channel.ack(this.message);
  }

  /** Nest's server publishes a reply on the tick after the handler's answer: the ack waits for the turn after it. */
  ackAfterReply(): void {
    setImmediate(() => {
      try {
        this.ack();
      } catch {
        // The channel closed meanwhile: the broker redelivers the request, whose record answers it again.
      }
    });
  }

  retryLater(delayMs: number): void {
    if (delayMs <= 0) return this.channel.nack(this.message, false, true);
    setTimeout(() => {
      try {
        this.channel.nack(this.message, false, true);
      } catch {
        // The channel closed meanwhile: the broker redelivers the message it never saw settled.
      }
    }, delayMs).unref();
  }

  reject(): void {
    this.channel.nack(this.message, false, false);
  }
}

/** A property or header as text: AMQP carries strings, numbers and byte arrays; anything else is no key. */
function textOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return undefined;
}
