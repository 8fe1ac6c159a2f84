import { IntrinsicException } from '@nestjs/common';
import type { IdempotencyError, IdempotencyErrorCode } from '../protocol/idempotency.errors.js';

/** The `extensions.code` of a refusal: its code upper-cased, as GraphQL's codes are (`IDEMPOTENCY_KEY_REUSE`). */
export function graphqlErrorCode(code: IdempotencyErrorCode): string {
  return code.toUpperCase();
}

/**
 * A refusal as GraphQL clients read one: an error of the field (the response's status stays 200) whose
 * `extensions` hold a stable `code`, and `retryAfterSeconds` where retrying later may succeed. graphql-js takes the
 * `extensions` of the error a resolver throws; rendered here, not by the Apollo driver, which would make a 409
 * `HttpException` an `INTERNAL_SERVER_ERROR`. An `IntrinsicException`: a client's mistake, which Nest's exception
 * handler does not log as an error.
 */
export class GraphqlRefusal extends IntrinsicException {
  readonly extensions: { code: string; retryAfterSeconds?: number };

  constructor(readonly refusal: IdempotencyError) {
    super(refusal.message);
    this.name = refusal.name;
    this.extensions = { code: graphqlErrorCode(refusal.code) };
    if (refusal.retryAfterSeconds !== undefined) this.extensions.retryAfterSeconds = refusal.retryAfterSeconds;
  }
}
