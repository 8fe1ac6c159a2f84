import {
  IdempotencyAccountUnresolvedError,
  IdempotencyBodyUnavailableError,
  type IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyReuseError,
  IdempotencyMisconfiguredError,
  IdempotencyOutcomeWithheldError,
  IdempotencyRecordUnreadableError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  IdempotencyRequestInProgressError,
} from '../protocol/idempotency.errors.js';

/**
 * One of each refusal an idempotent route may answer, with the words it is answered with (`required`: whether a
 * request without a key is refused). `execute()`'s own refusal is no route's.
 */
export function exampleRefusals(headerName: string, required: boolean): IdempotencyError[] {
  const terms = { key: headerName, usedWith: 'request (method, path, query or body)' };
  return [
    ...(required ? [new IdempotencyKeyRequiredError(`${headerName} header`)] : []),
    new IdempotencyKeyInvalidError(`${headerName} header`, 'it must be 1 to 255 visible ASCII characters'),
    new IdempotencyBodyUnavailableError('multipart/form-data'),
    new IdempotencyKeyReuseError(terms),
    new IdempotencyRequestInProgressError(2, terms),
    new IdempotencyMisconfiguredError('rawBody: true'),
    new IdempotencyAccountUnresolvedError(),
    new IdempotencyStoreUnavailableError(2),
    new IdempotencyShuttingDownError(2),
    new IdempotencyRecordUnreadableError(),
    new IdempotencyOutcomeWithheldError(),
  ];
}
