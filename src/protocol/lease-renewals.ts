import type { Logger } from '@nestjs/common';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type { IdempotencyStore, StoreTransaction } from './idempotency-store.interface.js';
import { describeScope, withTimeout } from './store-bounds.js';
import { publishIdempotencyEvent } from './idempotency-events.js';

/**
 * The leases of running attempts, renewed while their handlers run: a slow but live handler keeps its claim, a hung
 * one (past `maxHoldSeconds`) lets it go, and its transaction is cut. A renewal that finds the claim gone stops.
 */
export class LeaseRenewals {
  private readonly timers = new Map<IdempotencyRun, NodeJS.Timeout>();

  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    /** Ends the transaction of a run held past `maxHoldSeconds`, so that its row locks do not block the retry. */
    private readonly pastMaxHold: (transaction: StoreTransaction, policy: IdempotencyPolicy) => void,
  ) {}

  /** Renews the lease of `run` every third of it until it is stopped, for at most `maxHoldSeconds`. */
  start(run: IdempotencyRun, policy: IdempotencyPolicy): void {
    const holdUntil = Date.now() + policy.maxHoldSeconds * 1000;
    const timing = { leaseSeconds: policy.leaseSeconds, ttlSeconds: policy.ttlSeconds };
    const stop = () => this.stop(run);
    let renewing = false;
    const timer = setInterval(
      () => {
        if (renewing) return; // a renewal still waiting for the database: do not pile more up behind it
        if (Date.now() >= holdUntil) {
          stop();
          this.logger.warn(
            `The handler of ${describeScope(run.scope)} has run past maxHoldSeconds (${policy.maxHoldSeconds} s): its lease ` +
              'is no longer renewed, and a retry may take the key over once it lapses' +
              (run.transaction
                ? '; its transaction is cut (rolled back), so that its row locks do not block the retry.'
                : '.'),
          );
          if (run.transaction) this.pastMaxHold(run.transaction, policy);
          return;
        }
        renewing = true;
        // Bounded, so that one renewal the database never answers does not stop the ones after it.
        withTimeout(this.store.renew(run.claim, timing), policy, 'renewing the lease')
          .finally(() => (renewing = false))
          .then(
            (held) => {
              if (held || !this.timers.has(run)) return; // still held, or the attempt finished meanwhile
              stop();
              this.logger.warn(
                `The claim on ${describeScope(run.scope)} was taken over while its handler ran; its outcome will not be stored.`,
              );
              publishIdempotencyEvent('lockLost', () => ({ ...run.claim, during: 'renew' }));
            },
            (error: unknown) => this.logger.warn(`Renewing the lease of ${describeScope(run.scope)} failed: ${error}`),
          );
      },
      (policy.leaseSeconds * 1000) / 3,
    );
    timer.unref();
    this.timers.set(run, timer);
  }

  stop(run: IdempotencyRun): void {
    clearInterval(this.timers.get(run));
    this.timers.delete(run);
  }

  /** On shutdown, once no attempt runs: no renewal outlives the store. */
  stopAll(): void {
    for (const timer of this.timers.values()) clearInterval(timer);
  }
}
