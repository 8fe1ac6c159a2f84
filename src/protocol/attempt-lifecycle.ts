import type { Logger } from '@nestjs/common';
import {
  type IdempotencyError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  type KeyTerms,
} from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import { IdempotencyRun } from './idempotency-run.js';
import type {
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredStep,
  StoreTransaction,
} from './idempotency-store.interface.js';
import { OperationSteps } from './operation-steps.js';
import type { StepRecording } from './step-recording.js';
import { type AttemptEnding, IdempotencyAttempt } from './idempotency-attempt.js';
import type { AttemptOutcome, ClaimEnding } from './claim-ending.js';
import { LeaseRenewals } from './lease-renewals.js';
import type { ClaimedRequest, RunningAttempt, RunningAttempts } from './running-attempts.js';
import { describeScope, withTimeout } from './store-bounds.js';
import { type IdempotencyTelemetry, refusalOutcome } from './idempotency-telemetry.js';
import { publishIdempotencyEvent } from './idempotency-events.js';

/**
 * The attempts of this process from their claim to their end: each started (its transaction opened if the claim was
 * made without one, its lease renewed), ended once, through `ClaimEnding`, and, at shutdown, drained: waited for, or
 * abandoned past `shutdownTimeoutSeconds` (its claim released, its writes rolled back, its caller told).
 */
export class AttemptLifecycle implements AttemptEnding {
  private readonly leases: LeaseRenewals;

  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    /** Where every claim ends: stored, released, or its transaction cut. */
    private readonly claims: ClaimEnding,
    private readonly telemetry: IdempotencyTelemetry,
    /** The attempts running now, which the decision also asks whether a claim is refused during the drain. */
    private readonly attempts: RunningAttempts,
    /** Where the attempts' steps are recorded. */
    private readonly steps: StepRecording,
  ) {
    this.leases = new LeaseRenewals(store, logger, (transaction, policy) => void claims.cut(transaction, policy));
  }

  /**
   * Graceful shutdown's drain (`IdempotencyService.drain()`): new claims refused, running attempts given up to
   * `shutdownTimeoutSeconds`, those still running then abandoned.
   */
  async drain(): Promise<void> {
    await this.attempts.drain((run, attempt) => this.abandon(run, attempt));
    this.leases.stopAll();
  }

  /**
   * On a transactional route, the transaction its attempt will run in, opened before the claim and holding the
   * scope, so that a retry takes over at once a claim whose holder died, rather than once its lease lapses.
   * `undefined` in standard mode, and when the store allows no more transactions now: the claim then goes on without
   * one (its answer never waits for a slot), and the transaction is opened after it, falling back to the lease.
   */
  openHolder(scope: IdempotencyScope, policy: IdempotencyPolicy): Promise<StoreTransaction | undefined> {
    if (!policy.transactional) return Promise.resolve(undefined);
    return this.opened(this.store.beginHoldingTransaction(scope), scope, policy);
  }

  /** Rolls back the holder transaction of a claim that was not won (nothing ran in it). */
  discard(holder: StoreTransaction, policy: IdempotencyPolicy): void {
    void this.claims.discard(holder, policy);
  }

  /**
   * Starts the attempt of a won claim: its transaction (if any), its lease, and the steps earlier attempts recorded.
   * Counted by shutdown while it waits for its transaction slot, so that the drain waits for it too; one that shutdown
   * began meanwhile is given back.
   */
  async start(
    claim: IdempotencyClaim,
    won: { takeover: boolean; steps?: StoredStep[] },
    request: ClaimedRequest,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<IdempotencyAttempt> {
    const steps = new OperationSteps(won.steps ?? [], this.steps, policy);
    const starting = () => this.startRun(claim, won.takeover, steps, policy, holder);
    const run = await this.attempts.starts(starting, request, policy);
    const attempt = new IdempotencyAttempt(run, policy, this);
    if (this.attempts.refuses(request.inHand)) {
      await attempt.end({ response: undefined, failed: true, final: false });
      throw new IdempotencyShuttingDownError(policy.retryAfterSeconds);
    }
    return attempt;
  }

  /**
   * Ends the attempt. A final outcome is stored for replay; anything else releases the claim so that a retry runs
   * again. On a transactional route, a final outcome commits with the handler's writes, and anything else rolls them
   * back. Returns the error the caller must get instead of the outcome when it could not be committed (or the end of
   * a transactional attempt itself failed, a fault answered as the store's); `undefined` otherwise.
   */
  async finish(
    run: IdempotencyRun,
    outcome: AttemptOutcome,
    policy: IdempotencyPolicy,
  ): Promise<IdempotencyError | undefined> {
    this.leases.stop(run);
    run.endSteps();
    const attempt = this.attempts.get(run);
    try {
      if (attempt?.abandoned) return new IdempotencyShuttingDownError(policy.retryAfterSeconds, true);
      if (attempt) attempt.finishing = true; // shutdown waits for its outcome to be written, and never cuts it off
      const attributes = this.telemetry.runEnded(run);
      return await this.telemetry.inSpan('idempotency finalize', attributes, async () => {
        const refusal = await this.claims.end(run, outcome, policy, () => this.termsOf(run));
        const refused = refusalOutcome(refusal);
        if (refused) this.telemetry.count(refused, attributes);
        return refusal;
      });
    } catch (error) {
      // Outside a transaction the work stands, and its caller gets its outcome, as when a finalize fails (the key
      // stays in progress until its lease lapses). A transaction not yet committed is cut (rolled back) and the claim
      // released, fenced (a completed record stays), so that the caller is refused as for any fault of the store.
      this.logger.error(`Ending the claim of ${describeScope(run.scope)} failed: ${error}`);
      if (!run.transaction) return undefined;
      await this.claims.cut(run.transaction, policy);
      await this.claims.release(run.claim, policy);
      this.telemetry.count('store_unavailable', this.telemetry.attributesOf(run.claim));
      return new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    } finally {
      this.attempts.ended(run);
    }
  }

  /** Registers how the attempt's caller is answered if shutdown ends the attempt before its work is done. */
  onAbandoned(run: IdempotencyRun, answer: (error: IdempotencyError) => void): void {
    this.attempts.onAbandoned(run, answer);
  }

  private termsOf(run: IdempotencyRun): KeyTerms {
    const request = this.attempts.get(run);
    if (!request) throw new Error(`The run of ${describeScope(run.scope)} was not started by this IdempotencyService`);
    return request.terms;
  }

  /** Ends an attempt the drain could not wait for: its claim released (its writes rolled back), its caller told. */
  private async abandon(run: IdempotencyRun, attempt: RunningAttempt): Promise<void> {
    const { policy } = attempt;
    this.leases.stop(run);
    run.endSteps();
    this.logger.warn(
      `Shutting down: the handler of ${describeScope(run.scope)} did not finish within shutdownTimeoutSeconds ` +
        `(${this.attempts.timeoutSeconds} s); its claim is released${run.transaction ? ' and its writes rolled back' : ''}.`,
    );
    if (run.transaction) await this.claims.cut(run.transaction, policy);
    await this.claims.release(run.claim, policy);
    attempt.onAbandoned?.(new IdempotencyShuttingDownError(policy.retryAfterSeconds, true));
  }

  /** Opens the route's transaction if it has none yet, and keeps the lease alive while the handler runs. */
  private async startRun(
    claim: IdempotencyClaim,
    takeover: boolean,
    steps: OperationSteps,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<IdempotencyRun> {
    let run = new IdempotencyRun(claim, takeover, holder, steps);
    if (policy.transactional && !holder) {
      const opening = this.store.beginTransaction(policy.storeTimeoutSeconds * 1000);
      const transaction = await this.opened(opening, claim.scope, policy).catch(async (error: unknown) => {
        await this.claims.release(claim, policy);
        throw error;
      });
      run = new IdempotencyRun(claim, takeover, transaction, steps);
    }
    this.leases.start(run, policy);
    return run;
  }

  /**
   * A transaction being opened, within `storeTimeoutSeconds`; past it, or when it fails, the request is refused with
   * 503 (and one that opens late is rolled back).
   */
  private async opened<T extends StoreTransaction | undefined>(
    opening: Promise<T>,
    scope: IdempotencyScope,
    policy: IdempotencyPolicy,
  ): Promise<T> {
    try {
      return await withTimeout(opening, policy, 'beginning a transaction');
    } catch (error) {
      opening.then((late) => late?.rollback()).catch(() => undefined);
      this.logger.error(
        `Opening the transaction of ${describeScope(scope)} failed (the store is unavailable): ${error}`,
      );
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'beginTransaction', scope, error }));
      throw new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    }
  }
}
