import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { IdempotencyService, IdempotencyRequestInProgressError } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { PAYMENT_PROVIDER, type PaymentProvider } from '../payment-provider.js';
import { SAMPLE_CONFIG, type SampleConfig } from '../sample-config.js';
import { PayoutJob } from './payout-job.entity.js';

/**
 * Pays pending payouts in the background, each under the key kept with its job: a worker killed mid-job and
 * started again (or a second worker) finds the key in progress, then takes it over after the lease, and the
 * provider gets the same derived key, so a payout is made once.
 */
@Injectable()
export class PayoutWorker implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('PayoutWorker');
  private timer?: NodeJS.Timeout;
  private busy = false;

  constructor(
    @Inject(SAMPLE_CONFIG) private readonly config: SampleConfig,
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider,
    private readonly idempotency: IdempotencyService,
    private readonly context: PostgresIdempotencyContext,
  ) {}

  onApplicationBootstrap(): void {
    if (!this.config.payoutWorker) return;
    this.timer = setInterval(() => void this.payPending(), this.config.payoutPollMs);
    this.timer.unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  async payPending(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      const jobs = await this.dataSource.manager.find(PayoutJob, {
        where: { status: 'pending' },
        order: { created: 'ASC' },
        take: 10,
      });
      for (const job of jobs) await this.pay(job);
    } catch (error) {
      this.logger.error(`Polling payouts failed: ${error}`);
    } finally {
      this.busy = false;
    }
  }

  private async pay(job: PayoutJob): Promise<void> {
    const operation = { name: 'payout', account: job.account, key: job.idempotencyKey, input: { job: job.id } };
    try {
      await this.idempotency.execute(
        operation,
        async (run) => {
          const providerPayoutId = await this.provider.payout({
            account: job.account,
            amount: job.amount,
            currency: job.currency,
            idempotencyKey: run.deriveKey('provider'),
          });
          // In the run's transaction: the job is marked paid with the stored outcome, or not at all.
          await this.context
            .getRepository(PayoutJob)
            .update({ id: job.id }, { status: 'paid', providerPayoutId, paidAt: new Date() });
          return { providerPayoutId };
        },
        { transactional: true },
      );
    } catch (error) {
      if (error instanceof IdempotencyRequestInProgressError) return; // another worker holds it, or a dead one's lease runs
      this.logger.error(`Paying out ${job.id} failed; it is retried at the next poll: ${error}`);
    }
  }
}
