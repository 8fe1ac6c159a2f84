import type { DynamicModule, INestApplication } from '@nestjs/common';
import type { SampleConfig } from '../sample-config.js';
import { jetStreamPayouts } from './jetstream-payouts.js';
import { rabbitMqPayouts } from './rabbitmq-payouts.js';

/**
 * A broker the app consumes payout requests from (`PayoutRequestsConsumer` serves them all): the module that makes
 * `@Idempotent()` serve its messages, and how the app, a hybrid one, connects to it. One file per broker.
 */
export interface PayoutBroker {
  /** Imported by the app's module beside `IdempotencyModule.forRoot()`. */
  module: DynamicModule;
  /** Connects the app to the broker (`app.connectMicroservice()`), before `app.startAllMicroservices()`. */
  connect(app: INestApplication): Promise<void>;
}

/** The brokers `config` names: none without `RABBITMQ_URL` or `NATS_URL`, and then the app serves HTTP only. */
export function payoutBrokers(config: SampleConfig): PayoutBroker[] {
  return [
    ...(config.rabbitmq ? [rabbitMqPayouts(config.rabbitmq, config)] : []),
    ...(config.jetstream ? [jetStreamPayouts(config.jetstream, config)] : []),
  ];
}
