import { callable } from '../protocol/option-checks.js';

/**
 * Answers that ask the caller to try again (408 Request Timeout, 425 Too Early, 429 Too Many Requests): never an
 * outcome, on any transport, since a stored copy would repeat them forever.
 */
export const TRY_AGAIN_STATUSES: ReadonlySet<number> = new Set([408, 425, 429]);

/**
 * The default final outcomes of HTTP: everything below 500 but the "try again" answers and a malformed request
 * (400), which a client corrects and sends again under the same key.
 */
export function isFinalStatusByDefault(status: number): boolean {
  return status < 500 && status !== 400 && !TRY_AGAIN_STATUSES.has(status);
}

/** The option of the transports whose outcomes have an HTTP status (HTTP's routes, GraphQL's `HttpException`s). */
export interface FinalStatusOptions {
  /**
   * Whether a response status is a final outcome to store and replay; otherwise the claim is released
   * and a retry runs the handler again. Default: `isFinalStatusByDefault`, every status below 500 but 400, 408,
   * 425 and 429. Message consumers decide by their own `isFinalError`.
   */
  isFinalStatus?: (status: number) => boolean;
}

/** The rule of a handler: its own `isFinalStatus`, or the module's, or the default; checked, naming the option. */
export function finalStatusRule(
  moduleOptions: FinalStatusOptions,
  handlerOptions: FinalStatusOptions = {},
): (status: number) => boolean {
  return callable(
    'isFinalStatus',
    handlerOptions.isFinalStatus ?? moduleOptions.isFinalStatus ?? isFinalStatusByDefault,
  );
}
