import type { IdempotencyError } from './idempotency.errors.js';

/**
 * Why a step was refused: a mistake in the application's code (`outside_run`, `run_ended`, `invalid_name`,
 * `name_reused`, `overlapping`, `too_many_steps`, `steps_changed`, `unsupported`, and, after its work ran,
 * `unserializable` and `result_too_large`), or an attempt that lost its claim while the step ran (`claim_lost`:
 * another attempt took the key over, and will run the step itself).
 */
export type IdempotencyStepFault =
  | 'outside_run'
  | 'run_ended'
  | 'invalid_name'
  | 'name_reused'
  | 'overlapping'
  | 'too_many_steps'
  | 'steps_changed'
  | 'unsupported'
  | 'unserializable'
  | 'result_too_large'
  | 'claim_lost';

/**
 * A step refused before its work ran, or whose recovery point could not be recorded (its attempt lost its claim, its
 * result cannot be kept). The operation fails as on any error of its own (its claim released, its recovery point where it was); the
 * client is never told it was at fault.
 */
export class IdempotencyStepError extends Error {
  constructor(
    /** The stable reason, for code and logs. */
    readonly fault: IdempotencyStepFault,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The refusals the module raised for a step (its store unavailable, its result unreadable), as opposed to others. */
const stepRefusals = new WeakSet<IdempotencyError>();

/**
 * Marks `refusal` as a step's: a transport answers it as the module's own refusals when it reaches the handler's
 * caller. Other refusals met inside a handler (a nested `execute()`'s own) are the handler's errors, never answered
 * as if they were the call's.
 */
export function stepRefusal<E extends IdempotencyError>(refusal: E): E {
  stepRefusals.add(refusal);
  return refusal;
}

/** Whether `error` is a refusal the module raised for a step (`stepRefusal`). */
export function isStepRefusal(error: unknown): error is IdempotencyError {
  return typeof error === 'object' && error !== null && stepRefusals.has(error as IdempotencyError);
}
