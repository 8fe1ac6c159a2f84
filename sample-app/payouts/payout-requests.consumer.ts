import { Controller, Inject, Logger } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Idempotent, IdempotencyContext } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { newId } from '../ids.js';
import { PAYMENT_PROVIDER, type PaymentProvider } from '../payment-provider.js';
import { SAMPLE_CONFIG, type SampleConfig } from '../sample-config.js';
import { pauseIfAt } from '../test-pause.js';
import { PayoutJob, presentPayout } from './payout-job.entity.js';
import { type PayoutRequest, PayoutRequestPipe } from './payout-request.pipe.js';

/**
 * Payout requests from a broker (`brokers/`), paid at once, each message once: the provider is called with a key
 * derived from the message's run, and the paid payout is written in the run's transaction, so it commits with the
 * stored outcome; the message is acknowledged after that commit. `inFlight: 'wait'`: a duplicate delivered while the
 * first runs waits for its outcome rather than the module's `inFlight` of HTTP requests (`IDEMPOTENCY_IN_FLIGHT`).
 */
@Controller()
export class PayoutRequestsConsumer {
  private readonly logger = new Logger('PayoutRequests');

  constructor(
    @Inject(SAMPLE_CONFIG) private readonly config: SampleConfig,
    @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider,
    private readonly idempotency: IdempotencyContext,
    private readonly postgres: PostgresIdempotencyContext,
  ) {}

  /** An event: nobody waits for the payout. */
  @EventPattern('payouts.requested')
  @Idempotent({ transactional: true, inFlight: 'wait' })
  async requested(@Payload(PayoutRequestPipe) request: PayoutRequest): Promise<void> {
    await this.pay(request);
  }

  /** A request: its caller gets the payout back (a redelivered one, the same payout). */
  @MessagePattern('payouts.create')
  @Idempotent({ transactional: true, inFlight: 'wait' })
  create(@Payload(PayoutRequestPipe) request: PayoutRequest) {
    return this.pay(request);
  }

  private async pay({ account, amount, currency }: PayoutRequest) {
    const run = this.idempotency.run;
    if (!run)
      throw new Error('A payout request is paid only in its idempotent run (a message without a key is rejected)');
    const providerPayoutId = await this.provider.payout({
      account,
      amount,
      currency,
      idempotencyKey: run.deriveKey('provider'),
    });
    pauseIfAt(this.config, 'after-provider');
    const payouts = this.postgres.getRepository(PayoutJob);
    const payout = await payouts.save(
      payouts.create({
        id: newId('po'),
        account,
        amount,
        currency,
        status: 'paid',
        // The message's key: the payout of a message is found by it.
        idempotencyKey: run.key,
        providerPayoutId,
        paidAt: new Date(),
      }),
    );
    this.logger.log(`Paid ${payout.id} (${amount} ${currency}) to ${account} for message ${run.key}`);
    return presentPayout(payout);
  }
}
