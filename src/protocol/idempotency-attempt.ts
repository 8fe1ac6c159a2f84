import type { IdempotencyError } from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type { AttemptOutcome } from './claim-ending.js';
import { runWithin } from './current-run.js';

/** How an attempt ends and is answered at shutdown: the attempts' lifecycle (`AttemptLifecycle`). */
export interface AttemptEnding {
  finish(
    run: IdempotencyRun,
    outcome: AttemptOutcome,
    policy: IdempotencyPolicy,
  ): Promise<IdempotencyError | undefined>;
  onAbandoned(run: IdempotencyRun, answer: (error: IdempotencyError) => void): void;
}

/**
 * One attempt of a call under its claim, handed out by `IdempotencyService.begin()` when the call is to run: every
 * transport runs the work within it and ends it once, the same way. Its end stores the outcome the transport says is
 * final or releases the claim, and answers what the caller must get instead when that could not be done (a commit
 * that failed is `idempotency_store_unavailable`, whatever the transport).
 */
export class IdempotencyAttempt {
  private ending?: Promise<IdempotencyError | undefined>;

  constructor(
    /** The claim, its takeover and its transaction, as the work sees them (`IdempotencyContext`). */
    readonly run: IdempotencyRun,
    /** The call's options, resolved. */
    readonly policy: IdempotencyPolicy,
    private readonly lifecycle: AttemptEnding,
  ) {}

  /** Runs `work` within the claim: `IdempotencyContext` and a nested `execute()` see this attempt's run. */
  within<T>(work: () => T): T {
    return runWithin(this.run, work);
  }

  /**
   * Ends the claim with the work's outcome, once (a second call gets the first's answer): the refusal the caller must
   * get instead of the outcome, or `undefined`.
   */
  end(outcome: AttemptOutcome): Promise<IdempotencyError | undefined> {
    this.ending ??= this.lifecycle.finish(this.run, outcome, this.policy);
    return this.ending;
  }

  /** How the caller is answered if shutdown ends the attempt before its work is done. */
  onAbandoned(answer: (error: IdempotencyError) => void): void {
    this.lifecycle.onAbandoned(this.run, answer);
  }
}
