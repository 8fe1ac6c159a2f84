import type { Logger } from '@nestjs/common';
import type { Attributes } from '@opentelemetry/api';
import {
  IdempotencyKeyReuseError,
  IdempotencyOutcomeWithheldError,
  IdempotencyRecordUnreadableError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  IdempotencyRequestInProgressError,
} from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type {
  ClaimResult,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from './idempotency-store.interface.js';
import type { IdempotencyAttempt } from './idempotency-attempt.js';
import type { AttemptLifecycle } from './attempt-lifecycle.js';
import type { ClaimedRequest, RunningAttempts } from './running-attempts.js';
import type { ReplayCache } from './replay-cache.js';
import type { OutcomeSealing } from './outcome-sealing.js';
import { EnvelopeUnreadableError } from './outcome-envelope.js';
import { InFlightWait } from './in-flight-wait.js';
import { OnceLog } from './once-log.js';
import type { IdempotencyTelemetry } from './idempotency-telemetry.js';
import { describeScope, withTimeout } from './store-bounds.js';
import { isWithheldOutcome } from './withheld-outcome.js';
import { publishIdempotencyEvent } from './idempotency-events.js';

/** What a call does next: run the work as an attempt under its claim, or replay the stored outcome. */
export type IdempotencyDecision =
  | { action: 'run'; attempt: IdempotencyAttempt }
  | {
      action: 'replay';
      response: StoredResponse;
      /** Where the outcome was found: this process's replay cache, or the store. */
      from: 'memory' | 'store';
    };

/**
 * The decision on a call, the seed's four outcomes top to bottom: a new key is claimed (run); a key used with a
 * different call is refused; a key still in progress is refused with a retry hint, or awaited for a while; a completed
 * key is replayed.
 */
export class ClaimDecision {
  /** Unreadable records are logged once per scope, however often their keys are retried. */
  private readonly unreadableLog: OnceLog;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    private readonly replays: ReplayCache,
    private readonly sealing: OutcomeSealing,
    private readonly attempts: AttemptLifecycle,
    /** Asked, before each claim, whether the drain refuses it. */
    private readonly running: RunningAttempts,
    private readonly telemetry: IdempotencyTelemetry,
  ) {
    this.unreadableLog = new OnceLog(logger);
  }

  async decide(
    claim: IdempotencyClaim,
    fingerprint: string,
    policy: IdempotencyPolicy,
    { terms, inHand }: Pick<ClaimedRequest, 'terms' | 'inHand'>,
    attributes: Attributes,
  ): Promise<IdempotencyDecision> {
    const { scope } = claim;
    // A completed record does not change until it expires: one this process has seen is answered from memory.
    const lookup = this.replays.lookup(scope);
    if (lookup.cached) {
      if (lookup.cached.fingerprint !== fingerprint) throw new IdempotencyKeyReuseError(terms);
      return replayOf(lookup.cached.response, 'memory');
    }
    let { since } = lookup;
    let waited = false;
    const wait = new InFlightWait(this.store, this.logger, scope, policy);
    for (;;) {
      if (this.running.refuses(inHand)) throw new IdempotencyShuttingDownError(policy.retryAfterSeconds);
      const waiting = await wait.listen();
      const holder = await this.attempts.openHolder(scope, policy).catch((error: unknown) => {
        wait.stop();
        throw error;
      });
      const result = await this.claim(claim, fingerprint, policy, holder).catch((error: unknown) => {
        wait.stop();
        if (holder) this.attempts.discard(holder, policy);
        throw error;
      });
      if (result.claimed) {
        wait.stop();
        if (result.takeover) publishIdempotencyEvent('takeover', () => ({ scope, attempt: claim.attempt }));
        const request = { fingerprint, since, terms, inHand };
        return { action: 'run', attempt: await this.attempts.start(claim, result, request, policy, holder) };
      }
      if (holder) this.attempts.discard(holder, policy); // the answer does not wait for its rollback
      const { existing } = result;
      const response = existing.status === 'completed' ? this.readable(scope, existing.response) : undefined;
      if (existing.status === 'completed' && response) {
        this.replays.remember(scope, { fingerprint: existing.fingerprint, response }, existing.expiresInSeconds, since);
      }
      if (existing.fingerprint !== fingerprint) {
        wait.stop();
        throw new IdempotencyKeyReuseError(terms); // whether or not its outcome can be read
      }
      if (existing.status === 'completed') {
        wait.stop();
        if (!response) throw new IdempotencyRecordUnreadableError();
        return replayOf(response, 'store');
      }
      if (!waiting) throw new IdempotencyRequestInProgressError(policy.retryAfterSeconds, terms);
      if (!waited) this.telemetry.count('waited', attributes); // once per attempt that waits
      waited = true;
      await wait.untilChanged(); // then claim again: the outcome is replayed, or a released key is claimed
      since = this.replays.now();
    }
  }

  private claim(
    claim: IdempotencyClaim,
    fingerprint: string,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<ClaimResult> {
    const timing = { leaseSeconds: policy.leaseSeconds, ttlSeconds: policy.ttlSeconds };
    const claiming = this.store.claim(claim.scope, fingerprint, claim.attempt, timing, holder);
    return withTimeout(claiming, policy, 'claim').catch((error: unknown) => {
      this.logger.error(`Claiming ${describeScope(claim.scope)} failed (the store is unavailable): ${error}`);
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'claim', scope: claim.scope, error }));
      // A claim that lands after its request was refused would block the key for a lease: give it back.
      claiming.then((late) => late.claimed && this.store.release(claim)).catch(() => undefined);
      throw new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    });
  }

  /**
   * A completed record's outcome as it was stored, or `undefined` when it cannot be read (it does not decrypt),
   * reported: such a record is refused, never replayed, and its work never run again under the key (that could do it
   * twice).
   */
  private readable(scope: IdempotencyScope, stored: StoredResponse): StoredResponse | undefined {
    try {
      return this.sealing.open(scope, stored);
    } catch (error) {
      if (!(error instanceof EnvelopeUnreadableError)) throw error;
      const { reason } = error;
      publishIdempotencyEvent('recordUnreadable', () => ({ scope, reason }));
      this.unreadableLog.error(
        describeScope(scope),
        `The stored outcome of ${describeScope(scope)} cannot be read: ${reason}. It is refused with 500 ` +
          'idempotency_record_unreadable, never replayed nor run again: put the key that sealed it back in ' +
          'encryption.keys (or set encryption.acceptPlaintext during a switch-over), or delete the record once its ' +
          'outcome is known to the client another way.',
      );
      return undefined;
    }
  }
}

/** The replay of a stored outcome; a withheld one's stand-in is refused as the first call was. */
function replayOf(response: StoredResponse, from: 'memory' | 'store'): IdempotencyDecision {
  if (isWithheldOutcome(response)) throw new IdempotencyOutcomeWithheldError();
  return { action: 'replay', response, from };
}
