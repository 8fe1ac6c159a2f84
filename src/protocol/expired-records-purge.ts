import type { Logger } from '@nestjs/common';
import { resolvePurgeSettings } from './idempotency-policy.js';
import type { IdempotencyStore } from './idempotency-store.interface.js';

/** Deletes expired records in bounded batches: on demand, and every `purgeIntervalSeconds` unless that is off. */
export class ExpiredRecordsPurge {
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly settings: ReturnType<typeof resolvePurgeSettings>,
    private readonly logger: Logger,
  ) {}

  /** Starts the timer; it never keeps the process alive. */
  schedule(): void {
    const interval = this.settings.intervalSeconds;
    if (interval === false) return;
    this.timer = setInterval(() => {
      this.purge().catch((error: unknown) => this.logger.error(`Purging expired records failed: ${error}`));
    }, interval * 1000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Deletes every expired record, one bounded batch per statement; returns how many it deleted. */
  async purge(batchSize: number = this.settings.batchSize): Promise<number> {
    resolvePurgeSettings({ purgeBatchSize: batchSize });
    let total = 0;
    for (;;) {
      const purged = await this.store.purgeExpired(batchSize);
      total += purged;
      if (purged < batchSize) return total;
    }
  }
}
