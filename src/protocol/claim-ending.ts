import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from '@nestjs/common';
import {
  type IdempotencyError,
  IdempotencyMisconfiguredError,
  IdempotencyOutcomeWithheldError,
  IdempotencyStoreUnavailableError,
  type KeyTerms,
  IdempotencyRequestInProgressError,
} from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type {
  IdempotencyClaim,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from './idempotency-store.interface.js';
import { describeScope, StoreTimeoutError, withTimeout } from './store-bounds.js';
import type { OutcomeSealing } from './outcome-sealing.js';
import { withheldOutcome } from './withheld-outcome.js';

/** A final outcome to store: as this process keeps it (redacted), and as the store holds it (sealed). */
interface OutcomeToStore {
  kept: StoredResponse;
  sealed: StoredResponse;
}
import { publishIdempotencyEvent } from './idempotency-events.js';
import type { IdempotencyTelemetry } from './idempotency-telemetry.js';

/** How an attempt's work ended. */
export interface AttemptOutcome {
  /** The response as sent, or `undefined` when it could not be stored (streamed, too large). */
  response: StoredResponse | undefined;
  /** Whether the handler threw (its response, if any, is the exception filter's). */
  failed: boolean;
  /**
   * Whether `response` is the call's final outcome, to store and replay, as its transport decides by its own rule;
   * otherwise the claim is released and a retry runs again.
   */
  final: boolean;
}

/** First wait before a finalize is retried; doubled on each retry. */
const FINALIZE_BACKOFF_MS = 250;

/**
 * What finalizing found: the claim was still this attempt's (`'held'`: the outcome is stored, or the claim released),
 * another attempt had taken it over (`'taken-over'`: nothing was written), or it is not known yet (`'retrying'` in
 * the background).
 */
export type FinalizeResult = 'held' | 'taken-over' | 'retrying';

/**
 * Ends claims, the one place that does: a finished attempt's final outcome is stored (on a transactional route, in
 * the commit of the handler's writes) or its claim released (rolling the writes back), saying what the client must get
 * instead when that failed; outside a transaction, a store or release that fails is retried in the background.
 */
export class ClaimEnding {
  /** Transactions cut under their running handlers: nothing of them can commit. */
  private readonly cutTransactions = new WeakSet<StoreTransaction>();

  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    /** What of an outcome the store holds (encrypted with the module's key ring, if any). */
    private readonly sealing: OutcomeSealing,
    /** Counts what each finalize did: stored, released, retried, gave up. */
    private readonly telemetry: IdempotencyTelemetry,
    /** Told of each outcome stored, as it was before sealing (the replay cache keeps it). */
    private readonly stored: (run: IdempotencyRun, response: StoredResponse, policy: IdempotencyPolicy) => void,
  ) {}

  /** Ends a transaction under a handler that still runs (past maxHoldSeconds, or by shutdown): it rolls back and frees its locks. */
  async cut(transaction: StoreTransaction, policy: IdempotencyPolicy): Promise<void> {
    this.cutTransactions.add(transaction);
    transaction.abandon();
    // Gives the (now cut) connection and its transaction slot back.
    await this.endTransaction(transaction, 'rollback', policy).catch(() => undefined);
  }

  /**
   * Rolls back the transaction of an attempt that did not win its claim (it ran nothing), within
   * `storeTimeoutSeconds`, past which its connection is cut; a failure leaves nothing to undo.
   */
  async discard(transaction: StoreTransaction, policy: IdempotencyPolicy): Promise<void> {
    await this.endTransaction(transaction, 'rollback', policy).catch(() => undefined);
  }

  /** Stores or releases the finished attempt's outcome (committing or rolling back its transaction). */
  async end(
    run: IdempotencyRun,
    outcome: AttemptOutcome,
    policy: IdempotencyPolicy,
    termsOf: () => KeyTerms,
  ): Promise<IdempotencyError | undefined> {
    const { response, failed } = outcome;
    const final = outcome.final ? response : undefined;
    let toStore: OutcomeToStore | undefined;
    let withheld = false;
    try {
      toStore = final && this.prepared(run, final, policy);
    } catch (error) {
      // Storing the unredacted outcome would keep what the hook exists to keep out. Where a transaction rolls the
      // handler's writes back, the claim is released as if the handler had failed; elsewhere its work stands, so a
      // stand-in is stored that every retry is refused with, rather than run the handler again.
      if (run.transaction) {
        this.logger.error(
          `The redact hook threw on the outcome of ${describeScope(run.scope)}, so it was not stored: the handler's ` +
            `writes are rolled back, its claim released, and the call refused as idempotency_misconfigured. Make the ` +
            `hook total: ${error}`,
        );
        await this.end(run, { response: undefined, failed: true, final: false }, policy, termsOf);
        return new IdempotencyMisconfiguredError(`the redact hook threw: ${error}`);
      }
      this.logger.error(
        `The redact hook threw on the outcome of ${describeScope(run.scope)}, whose work stands (no transaction), so ` +
          `a stand-in is stored: the client and every retry get 500 idempotency_outcome_withheld, and the handler ` +
          `never runs again under the key. Make the hook total: ${error}`,
      );
      const standIn = withheldOutcome('redact-threw');
      toStore = { kept: standIn, sealed: this.sealing.seal(run.scope, standIn) };
      withheld = true;
    }
    const { transaction } = run;
    if (transaction && this.cutTransactions.has(transaction)) {
      // Rolled back past maxHoldSeconds: the key is released, unless a retry has taken it over meanwhile.
      const released = await this.finalize(run.claim, undefined, policy);
      return released === 'taken-over'
        ? new IdempotencyRequestInProgressError(policy.retryAfterSeconds, termsOf())
        : new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    }
    if (transaction && toStore && !failed) return this.commitWithOutcome(run, toStore, policy, termsOf);
    if (transaction) {
      // A streamed response reached the client as the handler wrote it: its writes stand, if they commit.
      const ending = response === undefined && !failed ? 'commit' : 'rollback';
      const ended = await this.endTransaction(transaction, ending, policy).then(
        () => true,
        (error: unknown) => {
          this.logger.error(`Ending the transaction of ${describeScope(run.scope)} failed: ${error}`);
          return false;
        },
      );
      // Nothing of the attempt committed, and the key is released: the client may retry, as for any fault of the
      // database (a handler whose connection was lost under it fails with that connection's error).
      if ((failed && transaction.connectionLost) || (ending === 'commit' && !ended)) {
        await this.finalize(run.claim, undefined, policy);
        return new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
      }
    }
    const finalized = await this.finalize(run.claim, toStore?.sealed, policy);
    if (finalized === 'held' && toStore) this.stored(run, toStore.kept, policy);
    // Another attempt took the key over (this one outlived its lease): its outcome is the one that stands.
    if (finalized === 'taken-over' && toStore && (withheld || !failed)) {
      return new IdempotencyRequestInProgressError(policy.retryAfterSeconds, termsOf());
    }
    return withheld ? new IdempotencyOutcomeWithheldError() : undefined;
  }

  /** The outcome to store: redacted by the route's hook, then sealed. */
  private prepared(run: IdempotencyRun, response: StoredResponse, policy: IdempotencyPolicy): OutcomeToStore {
    const kept = policy.redact ? policy.redact(response, run.scope) : response;
    if (!isStorableOutcome(kept)) {
      throw new TypeError(
        'it returned no { status, headers, body } outcome: an integer status from 100 to 599, headers of strings ' +
          'or arrays of strings, and a Buffer body',
      );
    }
    return { kept, sealed: this.sealing.seal(run.scope, kept) };
  }

  /** Stores the handler's writes and its outcome in one commit. */
  private async commitWithOutcome(
    run: IdempotencyRun,
    outcome: OutcomeToStore,
    policy: IdempotencyPolicy,
    termsOf: () => KeyTerms,
  ): Promise<IdempotencyError | undefined> {
    const transaction = run.transaction as NonNullable<IdempotencyRun['transaction']>;
    try {
      const held = await withTimeout(
        this.store.complete(run.claim, outcome.sealed, policy.ttlSeconds, transaction),
        policy,
        'storing the outcome',
      );
      if (!held) {
        publishIdempotencyEvent('lockLost', () => ({ ...run.claim, during: 'complete' }));
        await this.endTransaction(transaction, 'rollback', policy);
        this.logger.warn(
          `The claim on ${describeScope(run.scope)} was taken over by another attempt: this attempt's writes are rolled back.`,
        );
        return new IdempotencyRequestInProgressError(policy.retryAfterSeconds, termsOf());
      }
      await this.endTransaction(transaction, 'commit', policy);
      this.telemetry.count('stored', this.telemetry.attributesOf(run.claim));
      this.stored(run, outcome.kept, policy);
      return undefined;
    } catch (error) {
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'complete', scope: run.scope, error }));
      await this.endTransaction(transaction, 'rollback', policy).catch(() => undefined);
      this.logger.error(
        `Committing the work and outcome of ${describeScope(run.scope)} failed; the attempt is refused as the store being unavailable, and its retry ` +
          `gets the outcome if the commit went through after all, or runs again: ${error}`,
      );
      // If the commit did go through, the record is completed and this release finds nothing to do.
      await this.finalize(run.claim, undefined, policy);
      return new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    }
  }

  /**
   * Commits or rolls back within `storeTimeoutSeconds`; past it, the connection is cut, so that a stalled
   * database neither holds the response nor keeps the connection (a database rolls back what was not committed).
   */
  private async endTransaction(
    transaction: StoreTransaction,
    ending: 'commit' | 'rollback',
    policy: IdempotencyPolicy,
  ) {
    await withTimeout(transaction[ending](), policy, ending === 'commit' ? 'committing' : 'rolling back').catch(
      (error: unknown) => {
        if (error instanceof StoreTimeoutError) transaction.abandon();
        throw error;
      },
    );
  }

  /** Releases a claim whose attempt never ran (or was abandoned), retrying in the background if it fails. */
  release(claim: IdempotencyClaim, policy: IdempotencyPolicy): Promise<FinalizeResult> {
    return this.finalize(claim, undefined, policy);
  }

  /**
   * Stores the outcome (or releases the claim when there is none to store). A failure does not hold the
   * response: the finalize is retried in the background with a bounded exponential backoff.
   */
  private async finalize(
    claim: IdempotencyClaim,
    response: StoredResponse | undefined,
    policy: IdempotencyPolicy,
  ): Promise<FinalizeResult> {
    try {
      return (await this.finalizeOnce(claim, response, policy)) ? 'held' : 'taken-over';
    } catch (error) {
      this.logger.warn(`Finalizing ${describeScope(claim.scope)} failed (${error}); retrying in the background.`);
      const operation = response ? 'complete' : 'release';
      publishIdempotencyEvent('storeUnavailable', () => ({ operation, scope: claim.scope, error }));
      this.telemetry.count('finalize.retried', this.telemetry.attributesOf(claim));
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
        `in progress until its lease lapses (its retries refused as in progress, or held by a consumer), then the ` +
        `first one runs the handler again.`,
    );
    this.telemetry.count('finalize.gave_up', this.telemetry.attributesOf(claim));
    const finalize = response ? 'store' : 'release';
    publishIdempotencyEvent('finalizeGaveUp', () => ({ ...claim, finalize, error: lastError }));
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
      publishIdempotencyEvent('lockLost', () => ({ ...claim, during: response ? 'complete' : 'release' }));
    } else this.telemetry.count(response ? 'stored' : 'released', this.telemetry.attributesOf(claim));
    return held;
  }
}

/** Whether a redact hook's value is an outcome the store can hold and a transport replay, as its own are. */
function isStorableOutcome(value: StoredResponse | undefined): value is StoredResponse {
  if (typeof value !== 'object' || value === null) return false;
  const { status, headers, body } = value;
  if (!Number.isInteger(status) || status < 100 || status > 599 || !Buffer.isBuffer(body)) return false;
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return false;
  return Object.values(headers).every(
    (header) =>
      typeof header === 'string' || (Array.isArray(header) && header.every((part) => typeof part === 'string')),
  );
}
