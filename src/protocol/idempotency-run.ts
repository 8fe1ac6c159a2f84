import { createHash } from 'node:crypto';
import type { IdempotencyClaim, IdempotencyScope, StoreTransaction } from './idempotency-store.interface.js';
import { IdempotencyStepError } from './idempotency-step.error.js';
import type { JsonResult } from './jsonified.js';
import type { IdempotencyStep, StepOptions, StepsOfRun } from './idempotency-step.js';

/**
 * One claimed attempt at an idempotent operation: what its handler may know of it. Read it through
 * `IdempotencyContext` while the handler runs.
 */
export class IdempotencyRun {
  constructor(
    readonly claim: IdempotencyClaim,
    /** True when this attempt took the key over from one whose lease lapsed (it may have done part of the work). */
    readonly takeover: boolean,
    /** The transaction of a transactional route, in which the outcome is stored (or of the step running now). */
    readonly transaction?: StoreTransaction,
    /** The attempt's steps; none on a run the module did not start (`step()` refuses). */
    private readonly steps?: StepsOfRun<IdempotencyRun>,
  ) {}

  /**
   * Runs `work` as the step `name` of this operation, once across its attempts: an earlier attempt that completed it
   * recorded its result (a recovery point), which this attempt gets back without running it. Steps run one after
   * another, each named once per attempt, in the same order in every attempt; their results go through JSON (as
   * `execute()`'s). A step whose work throws is not recorded, and the error is the operation's: a retry resumes from
   * the steps recorded before it. See docs/steps.md.
   */
  step<T>(
    name: string,
    work: (step: IdempotencyStep) => Promise<T>,
    options: StepOptions = {},
  ): Promise<JsonResult<T>> {
    if (!this.steps) {
      return Promise.reject(
        new IdempotencyStepError(
          'outside_run',
          `Step ${JSON.stringify(name)} was called on a run the idempotency module did not start: call steps on the ` +
            'run a handler, consumer or execute() is given (or IdempotencyContext.step()).',
        ),
      );
    }
    return this.steps.run(this, name, work, options);
  }

  /**
   * The names of the operation's steps recorded so far, in order: those earlier attempts recorded (the recovery point
   * this attempt resumed from), then those this attempt recorded (none in a transactional operation, whose steps
   * commit with its outcome).
   */
  get recordedSteps(): readonly string[] {
    return this.steps?.recordedNames ?? [];
  }

  /** Ends the run's steps: a step begun after its attempt ended is refused (it has nothing to record into). */
  endSteps(): void {
    this.steps?.end();
  }

  /** This run, in the transaction of one of its steps: what the step's work sees while it runs. */
  inStepTransaction(transaction: StoreTransaction): IdempotencyRun {
    return new IdempotencyRun(this.claim, this.takeover, transaction, this.steps);
  }

  get scope(): IdempotencyScope {
    return this.claim.scope;
  }

  get key(): string {
    return this.claim.scope.key;
  }

  /**
   * A key for a call this operation makes to another service (`deriveKey('provider')`): the same for every
   * attempt at this operation, different for each purpose and scope, so that a call repeated after a crash
   * is deduplicated downstream.
   */
  deriveKey(purpose: string): string {
    const { account, endpoint, key } = this.claim.scope;
    return createHash('sha256')
      .update(JSON.stringify([account, endpoint, key, purpose]))
      .digest('base64url');
  }
}
