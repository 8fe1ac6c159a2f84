import type { SampleConfig } from '../sample-config.js';
import { jetStreamPayouts } from './jetstream-payouts.js';
import { rabbitMqPayouts } from './rabbitmq-payouts.js';
import type { PayoutBroker } from './payout-broker.js';

/** The brokers `config` names: none without `RABBITMQ_URL` or `NATS_URL`, and then the app serves HTTP only. */
export function payoutBrokers(config: SampleConfig): PayoutBroker[] {
  return [
    ...(config.rabbitmq ? [rabbitMqPayouts(config.rabbitmq, config)] : []),
    ...(config.jetstream ? [jetStreamPayouts(config.jetstream, config)] : []),
  ];
}
