import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from '@nestjs/common';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyClaim, IdempotencyStore, StoredResponse } from './idempotency-store.interface.js';
import { describeScope, withTimeout } from './store-bounds.js';

/** First wait before a finalize is retried; doubled on each retry. */
const FINALIZE_BACKOFF_MS = 250;

/**
 * What finalizing found: the claim was still this attempt's (`'held'`: the outcome is stored, or the claim released),
 * another attempt had taken it over (`'taken-over'`: nothing was written), or it is not known yet (`'retrying'` in
 * the background).
 */
export type FinalizeResult = 'held' | 'taken-over' | 'retrying';

/** Ends claims outside a transaction: stores their outcome or releases them, retrying in the background. */
export class ClaimFinalizer {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
  ) {}

  /**
   * Stores the outcome (or releases the claim when there is none to store). A failure does not hold the
   * response: the finalize is retried in the background with a bounded exponential backoff.
   */
  async finalize(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    policy: IdempotencyPolicy,
  ): Promise<FinalizeResult> {
    try {
      return (await this.finalizeOnce(claim, response, policy)) ? 'held' : 'taken-over';
    } catch (error) {
      this.logger.warn(`Finalizing ${describeScope(claim.scope)} failed (${error}); retrying in the background.`);
      void this.retryFinalize(claim, response, policy);
      return 'retrying';
    }
  }

  private async retryFinalize(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    policy: IdempotencyPolicy,
  ) {
    let lastError: unknown;
    for (let retry = 0; retry < policy.finalizeRetries; retry += 1) {
      await delay(FINALIZE_BACKOFF_MS * 2 ** retry, undefined, { ref: false });
      try {
        await this.finalizeOnce(claim, response, policy);
        this.logger.log(`Finalizing ${describeScope(claim.scope)} succeeded on retry ${retry + 1}.`);
        return;
      } catch (error) {
        lastError = error;
      }
    }
    this.logger.error(
      `Gave up finalizing ${describeScope(claim.scope)} after ${policy.finalizeRetries} retries (${lastError}). The key stays ` +
        `in progress: retries get 409 until its lease lapses, then the first one runs the handler again.`,
    );
  }

  private async finalizeOnce(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    policy: IdempotencyPolicy,
  ): Promise<boolean> {
    const what = response ? 'storing the outcome' : 'releasing the claim';
    const held = await withTimeout(
      response ? this.store.complete(claim, response, policy.ttlSeconds) : this.store.release(claim),
      policy,
      what,
    );
    if (!held) {
      this.logger.warn(
        `The claim on ${describeScope(claim.scope)} was taken over by another attempt; this attempt's outcome was not ${
          response ? 'stored' : 'released'
        }.`,
      );
    }
    return held;
  }
}
