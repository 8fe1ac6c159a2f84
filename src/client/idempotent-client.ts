import { createIdempotencyKey } from './idempotency-keys.js';
import { type RetryOptions, withRetries } from './with-retries.js';

/** The final answer of an idempotent call. */
export interface IdempotentResult {
  response: Response;
  /** The server replayed a stored outcome: the operation ran on an earlier attempt (or an earlier call). */
  replayed: boolean;
  /** The key every attempt of this call carried. */
  idempotencyKey: string;
  attempts: number;
}

export interface IdempotentRequestInit extends RequestInit {
  /** The intent's key; a new one is created when absent. Pass the same key to repeat the same intent. */
  idempotencyKey?: string;
  retry?: RetryOptions;
  /** Default: `Idempotency-Key`. */
  headerName?: string;
  /** Default: `Idempotent-Replay`. */
  replayHeaderName?: string;
  /** The `fetch` to use. Default: the global one. */
  fetch?: typeof fetch;
}

/**
 * `fetch` for a write that must not happen twice: the key is set once for the call and reused by every retry
 * (`withRetries`), and the result tells whether the answer was a replay.
 */
export async function idempotentFetch(
  input: string | URL,
  init: IdempotentRequestInit = {},
): Promise<IdempotentResult> {
  const {
    idempotencyKey = createIdempotencyKey(),
    retry,
    headerName,
    replayHeaderName,
    fetch: send = fetch,
    ...request
  } = init;
  const headers = new Headers(request.headers);
  headers.set(headerName ?? 'Idempotency-Key', idempotencyKey);
  let attempts = 0;
  const response = await withRetries(
    (attempt) => {
      attempts = attempt;
      return send(input, { ...request, headers, signal: retry?.signal ?? request.signal });
    },
    { ...retry, signal: retry?.signal ?? request.signal ?? undefined },
  );
  return {
    response,
    replayed: response.headers.get(replayHeaderName ?? 'Idempotent-Replay') === 'true',
    idempotencyKey,
    attempts,
  };
}

export interface IdempotentClientOptions {
  baseUrl: string;
  fetch?: typeof fetch;
  /** Sent with every request (e.g. authentication). */
  headers?: ConstructorParameters<typeof Headers>[0];
  retry?: RetryOptions;
  headerName?: string;
  replayHeaderName?: string;
}

/** A small JSON client whose writes are idempotent and retried safely. */
export function createIdempotentClient(options: IdempotentClientOptions) {
  const send = (method: string, path: string, body: unknown, init: IdempotentRequestInit = {}) => {
    const headers = new Headers(options.headers);
    new Headers(init.headers).forEach((value, name) => headers.set(name, value));
    if (body !== undefined) headers.set('Content-Type', 'application/json');
    return idempotentFetch(new URL(path, options.baseUrl), {
      fetch: options.fetch,
      retry: options.retry,
      headerName: options.headerName,
      replayHeaderName: options.replayHeaderName,
      ...init,
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  };
  return {
    post: (path: string, body?: unknown, init?: IdempotentRequestInit) => send('POST', path, body, init),
    patch: (path: string, body?: unknown, init?: IdempotentRequestInit) => send('PATCH', path, body, init),
    put: (path: string, body?: unknown, init?: IdempotentRequestInit) => send('PUT', path, body, init),
  };
}
