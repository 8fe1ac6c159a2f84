import type { IdempotencyPolicy } from './idempotency-policy.js';
import { LONGEST_TIMER_MS } from './option-checks.js';
import type { IdempotencyScope } from './idempotency-store.interface.js';

/** A store operation that did not answer within `storeTimeoutSeconds`. */
export class StoreTimeoutError extends Error {}

/** Bounds a store operation to `storeTimeoutSeconds`; the operation itself is not cancelled. */
export function withTimeout<T>(
  operation: Promise<T>,
  policy: Pick<IdempotencyPolicy, 'storeTimeoutSeconds'>,
  what: string,
): Promise<T> {
  return within(
    operation,
    policy.storeTimeoutSeconds * 1000,
    () => new StoreTimeoutError(`${what} took longer than storeTimeoutSeconds (${policy.storeTimeoutSeconds} s)`),
  );
}

/**
 * Bounds an operation to `timeoutMs`, rejecting with `timedOut()` past it; the operation itself is not cancelled,
 * its result is no longer awaited. One promise settled by whichever comes first, not a race of two: it runs two or
 * three times per request, and every promise costs the process's async hooks (the module's AsyncLocalStorage) as
 * well as its allocation.
 */
export function within<T>(operation: Promise<T>, timeoutMs: number, timedOut: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    // Past the longest delay Node.js keeps, a timer would fire after 1 ms; it never keeps the process alive.
    const timer = setTimeout(() => reject(timedOut()), Math.min(timeoutMs, LONGEST_TIMER_MS));
    timer.unref();
    operation.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the operation's own reason, passed on
        reject(error);
      },
    );
  });
}

/** How logs name a scope. */
export function describeScope(scope: IdempotencyScope): string {
  return `key ${JSON.stringify(scope.key)} of ${scope.endpoint}`;
}
