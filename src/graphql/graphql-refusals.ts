import { GraphQLError } from 'graphql';
import type { IdempotencyError, IdempotencyErrorCode } from '../protocol/idempotency.errors.js';

/** The `extensions.code` of a refusal: its code upper-cased, as GraphQL's codes are (`IDEMPOTENCY_KEY_REUSE`). */
export function graphqlErrorCode(code: IdempotencyErrorCode): string {
  return code.toUpperCase();
}

/**
 * A refusal as GraphQL clients read one: an error of the field (the response's status stays 200) with a stable
 * `extensions.code`, and `extensions.retryAfterSeconds` where retrying later may succeed. Rendered here, not by the
 * Apollo driver, which would make a 409 `HttpException` an `INTERNAL_SERVER_ERROR`.
 */
export function graphqlRefusal(error: IdempotencyError): GraphQLError {
  const extensions: Record<string, unknown> = { code: graphqlErrorCode(error.code) };
  if (error.retryAfterSeconds !== undefined) extensions.retryAfterSeconds = error.retryAfterSeconds;
  return new GraphQLError(error.message, { extensions, originalError: error });
}
