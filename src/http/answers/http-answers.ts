import { HttpException } from '@nestjs/common';
import type { IdempotencyError, IdempotencyErrorCode } from '../../protocol/idempotency.errors.js';
import type { StoredResponse } from '../../protocol/idempotency-store.interface.js';
import type { HttpResponse } from '../platforms/http-platform.js';
import type { HttpProfile, HttpRefusalAnswer } from './http-profile.js';
import { sendSealed } from '../capture/response-capture.js';

// What the HTTP edge answers itself: a replay, and its refusals (as the module's profile words them, and Retry-After).

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
  idempotency_record_unreadable: 500, // the server cannot read what it stored: an operator must act
  idempotency_outcome_withheld: 500, // the request ran; the server could not store its outcome
};

/** The status of a refusal in the `default` and `ietf` profiles. */
export function httpStatusOf(error: IdempotencyError): number {
  return HTTP_STATUS[error.code];
}

/** The JSON body of a refusal: `{ statusCode, error, message }`, `error` being the stable code. */
export function httpBodyOf(error: IdempotencyError): { statusCode: number; error: string; message: string } {
  return { statusCode: httpStatusOf(error), error: error.code, message: error.message };
}

/** The module's own answers, as they were before profiles. */
export const defaultProfile: HttpProfile = {
  name: 'default',
  replayHeaderName: 'Idempotent-Replay',
  refusal: (error) => ({ status: httpStatusOf(error), body: httpBodyOf(error), headers: {} }),
};

/** A refusal as `profile` words it, with `Retry-After` when waiting helps. */
export function refusalAnswer(error: IdempotencyError, profile: HttpProfile): HttpRefusalAnswer {
  const answer = profile.refusal(error);
  if (error.retryAfterSeconds === undefined) return answer;
  return { ...answer, headers: { ...answer.headers, 'retry-after': String(Math.ceil(error.retryAfterSeconds)) } };
}

/**
 * The refusal as Nest's exception filters expect an HTTP error: an `HttpException` with the profile's body, whose
 * `cause` is the `IdempotencyError` (so that a filter of the application can tell which refusal it is). The answer's
 * headers go onto the Node.js response, which every platform merges into what it sends (an exception filter's answer,
 * say), and which Fastify reads its `Content-Type` from.
 */
export function httpExceptionFor(error: IdempotencyError, profile: HttpProfile, response: HttpResponse): HttpException {
  const { status, body, headers } = refusalAnswer(error, profile);
  if (!response.raw.headersSent) {
    for (const [name, value] of Object.entries(headers)) response.raw.setHeader(name, value);
  }
  return new HttpException(body, status, { cause: error });
}

/**
 * Sends a stored response byte for byte, with the replay header. It is written here, not handed to Nest as a value:
 * interceptors outside the module's (a `{ data }` wrapper, say) would map it again, although the stored bytes are
 * already what they made of it the first time. Nest's own sending of the value that comes back is then ignored.
 */
export function sendReplay(response: HttpResponse, stored: StoredResponse, replayHeaderName: string): void {
  response.syncHeaders();
  sendSealed(response, { ...stored, headers: { ...stored.headers, [replayHeaderName.toLowerCase()]: 'true' } });
}

/** The response Nest's exception filter would send for `error`, for when the module must send it itself. */
export function errorResponse(error: IdempotencyError, profile: HttpProfile): StoredResponse {
  const { status, body, headers } = refusalAnswer(error, profile);
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', ...headers },
    body: Buffer.from(JSON.stringify(body)),
  };
}
