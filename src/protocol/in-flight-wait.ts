import type { Logger } from '@nestjs/common';
import { IdempotencyStoreUnavailableError } from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyScope, IdempotencyStore } from './idempotency-store.interface.js';
import { describeScope, withTimeout } from './store-bounds.js';
import { publishIdempotencyEvent } from './idempotency-events.js';

type Listening = ReturnType<IdempotencyStore['waitForChange']>;

/**
 * An attempt's wait for the outcome of a key another attempt holds (`inFlight: 'wait'`), for at most
 * `inFlightWaitSeconds` in all (no wait otherwise). Listening starts before each claim, so that an outcome stored
 * right after the claim's read is not missed.
 */
export class InFlightWait {
  private readonly deadline: number;
  private listening?: Listening;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    private readonly scope: IdempotencyScope,
    private readonly policy: IdempotencyPolicy,
  ) {
    this.deadline = Date.now() + (policy.inFlight === 'wait' ? policy.inFlightWaitSeconds * 1000 : 0);
  }

  /** Listens for the next change of the key's record while time is left; false once it has run out. */
  async listen(): Promise<boolean> {
    const left = this.deadline - Date.now();
    this.listening = left > 0 ? this.store.waitForChange(this.scope, left) : undefined;
    // Listening needs a free connection, which may not come: past the bound, the waiter goes on without it.
    if (this.listening) {
      await withTimeout(this.listening.listening, this.policy, 'listening for outcomes').catch(() => undefined);
    }
    return this.listening !== undefined;
  }

  /** Stops listening: the attempt has its answer (or its error). */
  stop(): void {
    this.listening?.cancel();
  }

  /**
   * Waits until the record held by the other attempt is completed or released, or the time is up. Returns at once
   * when it already was (or its lease lapsed): the caller claims again.
   */
  async untilChanged(): Promise<void> {
    const listening = this.listening as Listening;
    let marked: boolean;
    try {
      marked = await withTimeout(this.store.markAwaited(this.scope), this.policy, 'marking the record awaited');
    } catch (error) {
      listening.cancel();
      this.logger.error(`Waiting for ${describeScope(this.scope)} failed (the store is unavailable): ${error}`);
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'markAwaited', scope: this.scope, error }));
      throw new IdempotencyStoreUnavailableError(this.policy.retryAfterSeconds);
    }
    if (marked) await listening.changed;
    else listening.cancel();
  }
}
