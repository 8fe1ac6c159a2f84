import { nanos } from '@nats-io/transport-node';
import { type INestApplication, Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import type { MicroserviceOptions } from '@nestjs/microservices';
import { IdempotencyJetStreamModule, JetStreamServer } from '../../src/jetstream/index.js';
import type { SampleConfig } from '../sample-config.js';
import { JetStreamDeliveryWatch } from './jetstream-delivery-watch.guard.js';
import type { PayoutBroker } from './payout-broker.js';

/**
 * The subjects of the payout requests (the consumer's patterns, `payouts.requested` and `payouts.create`, which
 * `JetStreamServer` matches subjects against): one filter, as JetStream servers before 2.10 take no more.
 */
export const PAYOUT_SUBJECTS = ['payouts.*'];

/** How often a message is delivered before JetStream stops delivering it (a handler that keeps failing, not for good). */
const MAX_DELIVER = 5;

/**
 * The stream's duplicate window: a message published again with the same `Nats-Msg-Id` within it is dropped by the
 * stream and never reaches the app. Short here so that publishing a payout twice by hand shows the module's replay
 * (the same payout); the module makes the effect once either way, and JetStream's default is 2 minutes.
 */
const DUPLICATE_WINDOW_MS = 1_000;

/** Where the payout requests wait: `PAYOUT_STREAM`, on `PAYOUT_SUBJECTS` (whoever creates it creates it so). */
export const payoutStreamConfig = (stream: string) => ({
  name: stream,
  subjects: PAYOUT_SUBJECTS,
  duplicate_window: nanos(DUPLICATE_WINDOW_MS),
});

@Module({})
class JetStreamPayoutsModule {}

/**
 * Payout requests from NATS JetStream, on the package's `JetStreamServer`: it provisions the stream and the durable
 * pull consumer at start-up (explicit acks, `max_deliver` 5, `ack_wait` of `ackWaitSeconds`: how long a delivery
 * may go unsettled, the app's process dead say, before JetStream delivers it again), and the module acknowledges
 * each message once its outcome is committed.
 */
export function jetStreamPayouts(
  { url, stream, durable, ackWaitSeconds }: NonNullable<SampleConfig['jetstream']>,
  config: Pick<SampleConfig, 'pauseAt'>,
): PayoutBroker {
  return {
    module: {
      module: JetStreamPayoutsModule,
      // The key: the message's Nats-Msg-Id header.
      imports: [IdempotencyJetStreamModule.forRoot()],
      providers: [{ provide: APP_GUARD, useValue: new JetStreamDeliveryWatch(config) }],
    },
    async connect(app: INestApplication) {
      app.connectMicroservice<MicroserviceOptions>(
        {
          strategy: new JetStreamServer({
            servers: url,
            stream,
            durable,
            subjects: PAYOUT_SUBJECTS,
            provision: 'stream-and-consumer',
            streamConfig: payoutStreamConfig(stream),
            ackWaitSeconds,
            maxDeliver: MAX_DELIVER,
          }),
        },
        // The app's global pipes, filters and interceptors serve its messages too.
        { inheritAppConfig: true },
      );
    },
  };
}
