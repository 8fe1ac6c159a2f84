import { resolvePurgeSettings } from './idempotency-policy.js';
import type { IdempotencyStore } from './idempotency-store.interface.js';

/** Deletes expired records in bounded batches, so that no statement holds locks on a large part of the table. */
export class ExpiredRecordsPurge {
  constructor(
    private readonly store: Pick<IdempotencyStore, 'purgeExpired'>,
    private readonly batchSize: number,
  ) {}

  /** Deletes every expired record, one bounded batch per statement; returns how many it deleted. */
  async purge(batchSize: number = this.batchSize): Promise<number> {
    resolvePurgeSettings({ purgeBatchSize: batchSize });
    let total = 0;
    for (;;) {
      const purged = await this.store.purgeExpired(batchSize);
      total += purged;
      if (purged < batchSize) return total;
    }
  }
}
