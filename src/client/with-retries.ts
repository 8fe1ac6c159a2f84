/** When and how long `withRetries` waits; every field has the seed's default. */
export interface RetryOptions {
  /** Attempts in all, the first included. Default: 5. */
  attempts?: number;
  /** Full-jitter backoff: attempt n waits a random time below min(maxDelayMs, baseDelayMs × 2^(n-1)). Default: 500 ms. */
  baseDelayMs?: number;
  /** Default: 30 000 ms. */
  maxDelayMs?: number;
  /** Overall budget from the first attempt: no wait is started that would end past it. Default: none. */
  deadlineMs?: number;
  /** Stops waiting and retrying; the pending attempt is aborted too when `send` passes it on. */
  signal?: AbortSignal;
  /** Told before each wait. */
  onRetry?: (retry: { attempt: number; delayMs: number; reason: string }) => void;
  /** For tests: the clock, the random source and the sleep. */
  now?: () => number;
  random?: () => number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** Statuses worth retrying with the same key: the request was not processed, or not yet. */
const RETRYABLE_STATUSES = new Set([429, 502, 503, 504]);

/**
 * Sends a request until it gets an answer worth keeping: retries 409 `request_in_progress`, 429, 502, 503,
 * 504 and network errors, honouring `Retry-After` (seconds or an HTTP date), else waiting a full-jitter
 * exponential backoff. Any other answer, 4xx included (a 422 is a bug to surface, a 402 is an answer), is
 * returned at once, and any other error (an invalid URL) thrown at once. After the last attempt, the last answer
 * is returned, or the last network error thrown.
 * `send` must reuse one idempotency key: that is what makes the retries safe.
 */
export async function withRetries(
  send: (attempt: number) => Promise<Response>,
  options: RetryOptions = {},
): Promise<Response> {
  const attempts = options.attempts ?? 5;
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? abortableSleep;
  const startedAt = now();
  for (let attempt = 1; ; attempt += 1) {
    options.signal?.throwIfAborted();
    let response: Response | undefined;
    let failure: unknown;
    try {
      response = await send(attempt);
    } catch (error) {
      if (!isNetworkError(error) || options.signal?.aborted) throw error;
      failure = error;
    }
    const reason = response ? await retryReason(response) : `network error (${String(failure)})`;
    if (reason === undefined) return response as Response;

    const delayMs =
      (response && retryAfterMs(response.headers.get('retry-after'), now())) ?? backoffMs(attempt, options);
    const pastDeadline = options.deadlineMs !== undefined && now() + delayMs - startedAt > options.deadlineMs;
    if (attempt >= attempts || pastDeadline) {
      if (response) return response;
      throw failure;
    }
    await response?.body?.cancel().catch(() => undefined); // free the connection of an answer not kept
    options.onRetry?.({ attempt, delayMs, reason });
    await sleep(delayMs, options.signal);
  }
}

/** Why `response` should be retried, or `undefined` when it is the answer. */
async function retryReason(response: Response): Promise<string | undefined> {
  if (RETRYABLE_STATUSES.has(response.status)) return `status ${response.status}`;
  if (response.status === 409 && (await errorCodeOf(response)) === 'request_in_progress') return 'request in progress';
  return undefined;
}

async function errorCodeOf(response: Response): Promise<unknown> {
  try {
    return ((await response.clone().json()) as { error?: unknown }).error;
  } catch {
    return undefined;
  }
}

/** Full jitter: a random wait below the exponential ceiling, so that retrying clients spread out. */
export function backoffMs(
  attempt: number,
  options: Pick<RetryOptions, 'baseDelayMs' | 'maxDelayMs' | 'random'> = {},
): number {
  const ceiling = Math.min(options.maxDelayMs ?? 30_000, (options.baseDelayMs ?? 500) * 2 ** (attempt - 1));
  return Math.floor((options.random ?? Math.random)() * ceiling);
}

/** `Retry-After` in milliseconds from `now`: delay-seconds or an HTTP date; `undefined` when absent or invalid. */
export function retryAfterMs(header: string | null, now: number): number | undefined {
  if (header === null) return undefined;
  const value = header.trim();
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  // An HTTP date names its day and month ("Wed, 02 Dec 2026 12:00:05 GMT"); bare numbers are not dates.
  const date = /[a-z]/i.test(value) ? Date.parse(value) : Number.NaN;
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/** The codes of the system or undici error that Node's `fetch` gives as the cause of a request that got no answer. */
const NETWORK_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
]);

/** What browsers' `fetch` rejects with when a request got no answer, without a cause: Chromium, Firefox, WebKit. */
const BROWSER_NETWORK_ERROR_MESSAGES = new Set([
  'Failed to fetch',
  'NetworkError when attempting to fetch resource.',
  'Load failed',
]);

/**
 * Whether `fetch` rejected because the request got no answer (refused, reset, dropped, timed out), which a retry may
 * get past, rather than for a mistake of the call (an invalid URL, scheme, port or header), which it never does and
 * which is thrown at once. Node's `fetch` rejects with `TypeError('fetch failed')` whose cause carries the network
 * error's code, and with a TypeError without such a cause for a mistake; browsers tell neither, and are known by
 * message. Checked by name: a `fetch` from another realm (a polyfill, a test VM, an iframe) throws its own TypeError.
 */
function isNetworkError(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { name, message, cause } = error as { name?: unknown; message?: unknown; cause?: unknown };
  if (name !== 'TypeError' || typeof message !== 'string') return false;
  if (BROWSER_NETWORK_ERROR_MESSAGES.has(message)) return true;
  const code = typeof cause === 'object' && cause !== null ? (cause as { code?: unknown }).code : undefined;
  return message === 'fetch failed' && typeof code === 'string' && NETWORK_ERROR_CODES.has(code);
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    signal?.throwIfAborted();
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the signal's reason, as fetch() rejects
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
