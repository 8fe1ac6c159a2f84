import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyScope } from './idempotency-store.interface.js';

/** A store operation that did not answer within `storeTimeoutSeconds`. */
export class StoreTimeoutError extends Error {}

/**
 * Bounds a store operation, allowing it `waitMs` more when it may wait that long on purpose (for another attempt);
 * the operation itself is not cancelled, its result is no longer awaited.
 */
export async function withTimeout<T>(
  operation: Promise<T>,
  policy: Pick<IdempotencyPolicy, 'storeTimeoutSeconds'>,
  what: string,
  waitMs = 0,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const beyond = waitMs > 0 ? ` beyond its ${waitMs} ms wait for the key` : '';
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new StoreTimeoutError(
            `${what} took longer than storeTimeoutSeconds (${policy.storeTimeoutSeconds} s)${beyond}`,
          ),
        ),
      policy.storeTimeoutSeconds * 1000 + waitMs,
    );
  });
  try {
    return await Promise.race([operation, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** How logs name a scope. */
export function describeScope(scope: IdempotencyScope): string {
  return `key ${JSON.stringify(scope.key)} of ${scope.endpoint}`;
}
