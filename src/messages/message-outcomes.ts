import { HttpException } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { IdempotencyError } from '../protocol/idempotency.errors.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';

/**
 * A handler's final outcome as the protocol stores it (its `StoredResponse`, whose statuses mean for messages what
 * they mean for HTTP): a value (`200`, as JSON, which is how Nest's RPC serializers send it too, so that a replay sends
 * the same bytes), no value (`204`), or a final error (`422`, `{ "error": ... }`).
 */
export type MessageOutcome = { kind: 'value'; value: unknown } | { kind: 'error'; error: unknown };

const JSON_TYPE = { 'content-type': 'application/json' };

export function storedOutcome(outcome: MessageOutcome): StoredResponse {
  if (outcome.kind === 'error') {
    return { status: 422, headers: JSON_TYPE, body: Buffer.from(JSON.stringify({ error: outcome.error })) };
  }
  const json = JSON.stringify(outcome.value);
  // `undefined`, a function or a symbol: Nest sends no value for them either.
  if (json === undefined) return { status: 204, headers: {}, body: Buffer.alloc(0) };
  return { status: 200, headers: JSON_TYPE, body: Buffer.from(json) };
}

export function outcomeOf(stored: StoredResponse): MessageOutcome {
  if (stored.status === 204) return { kind: 'value', value: undefined };
  const parsed: unknown = JSON.parse(stored.body.toString('utf8'));
  return stored.status === 422
    ? { kind: 'error', error: (parsed as { error: unknown }).error }
    : { kind: 'value', value: parsed };
}

/**
 * What of an error a final outcome stores, and its caller gets: an `RpcException`'s error, an `HttpException`'s
 * response (a `ValidationPipe`'s `{ statusCode, message, error }`), or another error's name and message.
 */
export function storableError(error: unknown): unknown {
  if (error instanceof RpcException) return error.getError();
  if (error instanceof HttpException) return error.getResponse();
  if (error instanceof IdempotencyError) return { code: error.code, message: error.message };
  if (error instanceof Error) return { name: error.name, message: error.message };
  return error;
}

/**
 * A final error as a request's caller gets it, the first time as on each replay: an `RpcException` of what is stored
 * (Nest would answer another error `Internal server error`, and log it).
 */
export function finalError(stored: unknown): RpcException {
  return new RpcException(stored as object);
}
