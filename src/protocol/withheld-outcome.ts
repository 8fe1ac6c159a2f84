import type { StoredResponse } from './idempotency-store.interface.js';

/**
 * The header that marks a stored stand-in: it begins with a colon, which no transport's
 * header name holds, so no outcome a transport stores has it.
 */
const WITHHELD_HEADER = ':nest-idempotency-withheld';

/**
 * What is stored in place of an outcome that could not be stored as it was (the `redact` hook threw on it) while its
 * work stands: a 500 with nothing of the outcome, which every later call with the key is refused with
 * (`IdempotencyOutcomeWithheldError`) rather than run again. Sealed like any outcome.
 */
export function withheldOutcome(reason: string): StoredResponse {
  return { status: 500, headers: { [WITHHELD_HEADER]: reason }, body: Buffer.alloc(0) };
}

/** Whether a stored outcome is the stand-in of a withheld one. */
export function isWithheldOutcome(stored: StoredResponse): boolean {
  return stored.status === 500 && stored.headers[WITHHELD_HEADER] !== undefined;
}
