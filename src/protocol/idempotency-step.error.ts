/**
 * Why a step was refused: a mistake in the application's code (`outside_run`, `invalid_name`, `name_reused`,
 * `overlapping`, `steps_changed`, `unsupported`), or an attempt that lost its claim while the step ran
 * (`claim_lost`: another attempt took the key over, and will run the step itself).
 */
export type IdempotencyStepFault =
  'outside_run' | 'invalid_name' | 'name_reused' | 'overlapping' | 'steps_changed' | 'unsupported' | 'claim_lost';

/**
 * A step refused before its work ran, or whose recovery point could not be recorded because its attempt lost its
 * claim. The operation fails as on any error of its own (its claim released, its recovery point where it was); the
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
