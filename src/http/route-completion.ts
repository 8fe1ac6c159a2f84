import { HttpException } from '@nestjs/common';
import type { AbandonedOperation, OperationCompletion } from '../protocol/idempotency-completer.js';
import { isFinalStatusByDefault } from '../transport-kit/final-statuses.js';

/** What Express and Fastify send with a JSON body: a replay of a completion sends it too. */
const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8' };

/**
 * The completion of an HTTP route's abandoned requests, for `IdempotencyCompleter.register('POST /v1/charges', ...)`:
 * `work` returns what the handler would have returned, stored as its JSON with `status` (the route's: 201 for Nest's
 * POST, or its `@HttpCode()`). An `HttpException` that `work` throws with a final status (`isFinalStatus`, the route's
 * rule) is stored as Nest would have answered it; any other error leaves the request for a later attempt.
 */
export function routeCompletion(
  status: number,
  work: (operation: AbandonedOperation) => Promise<unknown>,
  isFinalStatus: (status: number) => boolean = isFinalStatusByDefault,
): OperationCompletion {
  return async (operation) => {
    try {
      return { status, body: await work(operation), headers: JSON_HEADERS };
    } catch (error) {
      if (!(error instanceof HttpException) || !isFinalStatus(error.getStatus())) throw error;
      const response = error.getResponse();
      // Nest's body for an exception made of a message alone.
      const body = typeof response === 'string' ? { statusCode: error.getStatus(), message: response } : response;
      return { status: error.getStatus(), body, headers: JSON_HEADERS };
    }
  };
}
