import type { Logger } from '@nestjs/common';
import type { MessageConsumer, MessageDelivery } from './message-delivery.interface.js';

/**
 * A delivery settled at most once: a broker closes a channel (RabbitMQ) on a second settlement of one message. One
 * that cannot be settled (its connection closed meanwhile) is left to the broker, which redelivers what was not
 * acknowledged; a settlement later than that is only logged.
 */
export class SettledOnce implements MessageDelivery {
  private settled = false;

  constructor(
    private readonly delivery: MessageDelivery,
    private readonly logger: Logger,
  ) {}

  get deliveries(): number {
    return this.delivery.deliveries;
  }

  get consumer(): MessageConsumer {
    return this.delivery.consumer;
  }

  property(name: string): string | undefined {
    return this.delivery.property(name);
  }

  header(name: string): string | undefined {
    return this.delivery.header(name);
  }

  ack(): void {
    this.settle('acknowledge', () => this.delivery.ack());
  }

  ackAfterReply(): void {
    this.settle('acknowledge', () => this.delivery.ackAfterReply());
  }

  retryLater(delayMs: number): void {
    this.settle('give back', () => this.delivery.retryLater(delayMs));
  }

  reject(): void {
    this.settle('reject', () => this.delivery.reject());
  }

  private settle(what: string, settle: () => void): void {
    if (this.settled) return;
    this.settled = true;
    try {
      settle();
    } catch (error) {
      this.logger.warn(`Could not ${what} a message (the broker redelivers it if it was not acknowledged): ${error}`);
    }
  }
}
