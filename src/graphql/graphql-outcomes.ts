import { HttpException } from '@nestjs/common';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';

const JSON_TYPE = { 'content-type': 'application/json' };

/**
 * A resolver's final outcome as the protocol stores it: its value (`200`, `{ "value": ... }`, so that `null` and a
 * missing value are kept apart), or an `HttpException` whose status is final (that status, `{ "error": response,
 * "message": message }`), which a replay throws again for the driver to render as it did the first time: a GraphQL
 * error's message is the exception's `message`, which an exception of the application's may set apart from its
 * response.
 */
export function storedValue(value: unknown): StoredResponse {
  return { status: 200, headers: JSON_TYPE, body: Buffer.from(JSON.stringify({ value })) };
}

export function storedException(exception: HttpException): StoredResponse {
  const body = JSON.stringify({ error: exception.getResponse(), message: exception.message });
  return { status: exception.getStatus(), headers: JSON_TYPE, body: Buffer.from(body) };
}

/** The stored outcome as the resolver gave it: `{ value }`, or the exception to throw. */
export function outcomeOf(stored: StoredResponse): { value: unknown } | { exception: HttpException } {
  const parsed = JSON.parse(stored.body.toString('utf8')) as {
    value?: unknown;
    error?: string | object;
    message?: string;
  };
  if (stored.status === 200) return { value: parsed.value };
  const exception = new HttpException(parsed.error ?? '', stored.status);
  // Stored before the message was (0.3.0's first builds): the message HttpException derives from the response.
  if (typeof parsed.message === 'string') exception.message = parsed.message;
  return { exception };
}
