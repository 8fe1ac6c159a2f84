import { type INestApplication, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { type MicroserviceOptions, Transport } from '@nestjs/microservices';
import amqp from 'amqplib';
import { IdempotencyRabbitMQModule } from '../../src/rabbitmq/index.js';
import type { SampleConfig } from '../sample-config.js';
import type { PayoutBroker } from './payout-broker.js';
import { RabbitMqDeliveryWatch } from './rabbitmq-delivery-watch.guard.js';

/** How often a message is delivered before RabbitMQ dead-letters it (a handler that keeps failing, not for good). */
const DELIVERY_LIMIT = 5;

/** Where the queue's dead letters go: a queue beside it, `<queue>.dead`. */
export const deadLettersOf = (queue: string) => `${queue}.dead`;

/**
 * The payout queue's arguments: a quorum queue (it counts each message's deliveries) that dead-letters a message
 * rejected by the module (no key, a key reused with another payload) or delivered `DELIVERY_LIMIT` times. Whoever
 * declares the queue (the app's server, a producer's client) declares it with these.
 */
export function payoutQueueOptions(queue: string) {
  return {
    durable: true,
    arguments: {
      'x-queue-type': 'quorum',
      'x-delivery-limit': DELIVERY_LIMIT,
      'x-dead-letter-exchange': '',
      'x-dead-letter-routing-key': deadLettersOf(queue),
    },
  };
}

@Module({})
class RabbitMqPayoutsModule {}

/** Payout requests from RabbitMQ, on Nest's RabbitMQ server with `noAck: false`: the module acknowledges them. */
export function rabbitMqPayouts(
  { url, queue }: { url: string; queue: string },
  config: Pick<SampleConfig, 'pauseAt'>,
): PayoutBroker {
  return {
    module: {
      module: RabbitMqPayoutsModule,
      imports: [IdempotencyRabbitMQModule.forRoot()],
      providers: [{ provide: APP_GUARD, useValue: new RabbitMqDeliveryWatch(config) }],
    },
    async connect(app: INestApplication) {
      await declareDeadLetters(url, queue);
      app.connectMicroservice<MicroserviceOptions>(
        {
          transport: Transport.RMQ,
          options: { urls: [url], queue, queueOptions: payoutQueueOptions(queue), noAck: false, prefetchCount: 10 },
        },
        // The app's global pipes, filters and interceptors serve its messages too.
        { inheritAppConfig: true },
      );
    },
  };
}

/** Nest's server declares the queue it consumes, not the one its dead letters go to, without which they are dropped. */
async function declareDeadLetters(url: string, queue: string): Promise<void> {
  const connection = await amqp.connect(url);
  try {
    const channel = await connection.createChannel();
    await channel.assertQueue(deadLettersOf(queue), { durable: true });
  } finally {
    await connection.close();
  }
}
