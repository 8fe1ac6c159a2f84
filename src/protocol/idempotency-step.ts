import type { JsonResult } from './jsonified.js';

/** What a step's work gets. */
export interface IdempotencyStep {
  /** The step's name, as given. */
  readonly name: string;
  /**
   * A key for the calls this step makes to other services (a card provider's idempotency key): the same in every
   * attempt at this operation, different for each step and scope, so that a step run again after a crash is
   * deduplicated downstream.
   */
  readonly key: string;
}

export interface StepOptions {
  /**
   * Runs the step in a transaction of the store's: what it writes through the store's context (the manager and
   * repositories its `IdempotencyContext` gives, as a transactional handler's) commits together with its recovery
   * point, so a crash leaves both or neither. Refused on a store that runs no transactions (`transactionsRefused`). In a
   * transactional operation every step is in the operation's transaction, whatever this says. Default: `false` (the
   * recovery point is recorded after the work, on its own: a crash in between runs the step again, with the same
   * `key`).
   */
  transactional?: boolean;
}

/** The steps of one attempt, as its run calls them (`OperationSteps`). */
export interface StepsOfRun<Run> {
  /** The names of the operation's steps recorded so far, in order (earlier attempts', then this one's). */
  readonly recordedNames: readonly string[];
  /** Refuses steps from now on: the attempt has ended. */
  end(): void;
  run<T>(
    run: Run,
    name: string,
    work: (step: IdempotencyStep) => Promise<T>,
    options: StepOptions,
  ): Promise<JsonResult<T>>;
}
