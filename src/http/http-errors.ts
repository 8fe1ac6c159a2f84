import { HttpException } from '@nestjs/common';
import type { IdempotencyError, IdempotencyErrorCode } from '../protocol/idempotency.errors.js';

/** The HTTP status of each refusal: the client's fault (4xx), the server's set-up (500), or try again later (409, 503). */
const HTTP_STATUS: Record<IdempotencyErrorCode, number> = {
  idempotency_key_required: 400,
  idempotency_key_invalid: 400,
  idempotency_body_unsupported: 415,
  idempotency_misconfigured: 500,
  idempotency_account_unresolved: 500,
  idempotency_operation_invalid: 500, // only execute() throws it: a mistake of the server's own code
  idempotency_key_reuse: 422,
  request_in_progress: 409,
  idempotency_store_unavailable: 503,
  idempotency_shutting_down: 503,
};

export function httpStatusOf(error: IdempotencyError): number {
  return HTTP_STATUS[error.code];
}

/** The JSON body of a refusal: `{ statusCode, error, message }`, `error` being the stable code. */
export function httpBodyOf(error: IdempotencyError): { statusCode: number; error: string; message: string } {
  return { statusCode: httpStatusOf(error), error: error.code, message: error.message };
}

/**
 * The refusal as Nest's exception filters expect an HTTP error: an `HttpException` with the module's body, whose
 * `cause` is the `IdempotencyError` (so that a filter of the application can tell which refusal it is).
 */
export function httpExceptionFor(error: IdempotencyError): HttpException {
  return new HttpException(httpBodyOf(error), httpStatusOf(error), { cause: error });
}
