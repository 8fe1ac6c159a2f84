import { type CanActivate, type ExecutionContext, Logger } from '@nestjs/common';
import { RmqContext } from '@nestjs/microservices';
import type { Channel, Message } from 'amqplib';
import type { SampleConfig } from '../sample-config.js';
import { pauseIfAt } from '../test-pause.js';

/**
 * Not a guard of access (it lets every message through): the first of the app's code to see a RabbitMQ message, before
 * the idempotency module claims it. It logs how each message is settled (`Message <id> acknowledged`, `given back`,
 * `rejected`: what a person publishing a payout twice sees), by wrapping the acknowledgements of its channel once,
 * and hosts the test-only pause points there: before the claim, and before the acknowledgement (after the commit).
 */
export class RabbitMqDeliveryWatch implements CanActivate {
  private readonly logger = new Logger('PayoutRequests');
  private readonly watched = new WeakSet<Channel>();

  constructor(private readonly config: Pick<SampleConfig, 'pauseAt'>) {}

  canActivate(context: ExecutionContext): boolean {
    const message = context.getType() === 'rpc' ? context.switchToRpc().getContext<unknown>() : undefined;
    if (!(message instanceof RmqContext)) return true;
    this.watch(message.getChannelRef() as Channel);
    pauseIfAt(this.config, 'before-claim');
    return true;
  }

  private watch(channel: Channel): void {
    if (this.watched.has(channel)) return;
    this.watched.add(channel);
    const ack = channel.ack.bind(channel);
    const nack = channel.nack.bind(channel);
    channel.ack = (message: Message, allUpTo?: boolean) => {
      pauseIfAt(this.config, 'before-ack');
      ack(message, allUpTo);
      this.logger.log(`Message ${message.properties.messageId} acknowledged`);
    };
    channel.nack = (message: Message, allUpTo?: boolean, requeue = true) => {
      nack(message, allUpTo, requeue);
      this.logger.log(`Message ${message.properties.messageId} ${requeue ? 'given back' : 'rejected'}`);
    };
  }
}
