import { type CanActivate, type ExecutionContext, Logger } from '@nestjs/common';
import type { JsMsg } from '@nats-io/jetstream';
import { JetStreamContext } from '../../src/jetstream/index.js';
import type { SampleConfig } from '../sample-config.js';
import { pauseIfAt } from '../test-pause.js';

/**
 * `RabbitMqDeliveryWatch`'s counterpart for JetStream: not a guard of access (it lets every message through), but the
 * first of the app's code to see a JetStream message, before the idempotency module claims it. It logs how the
 * message is settled (`Message <Nats-Msg-Id> acknowledged`, `given back`, `rejected`) by wrapping the message's own
 * `ack()`, `nak()` and `term()` (each JetStream message settles itself), and hosts the test-only pause points there:
 * before the claim, and before the acknowledgement (after the commit).
 */
export class JetStreamDeliveryWatch implements CanActivate {
  private readonly logger = new Logger('PayoutRequests');

  constructor(private readonly config: Pick<SampleConfig, 'pauseAt'>) {}

  canActivate(context: ExecutionContext): boolean {
    const message = context.getType() === 'rpc' ? context.switchToRpc().getContext<unknown>() : undefined;
    if (!(message instanceof JetStreamContext)) return true;
    this.watch(message.getMessage());
    pauseIfAt(this.config, 'before-claim');
    return true;
  }

  private watch(message: JsMsg): void {
    const key = message.headers?.get('Nats-Msg-Id') || '(no Nats-Msg-Id)';
    const ack = message.ack.bind(message);
    const nak = message.nak.bind(message);
    const term = message.term.bind(message);
    message.ack = () => {
      pauseIfAt(this.config, 'before-ack');
      ack();
      this.logger.log(`Message ${key} acknowledged`);
    };
    message.nak = (delayMs?: number) => {
      nak(delayMs);
      this.logger.log(`Message ${key} given back`);
    };
    message.term = (reason?: string) => {
      term(reason);
      this.logger.log(`Message ${key} rejected`);
    };
  }
}
