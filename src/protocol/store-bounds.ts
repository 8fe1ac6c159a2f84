import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyScope } from './idempotency-store.interface.js';

/** A store operation that did not answer within `storeTimeoutSeconds`. */
export class StoreTimeoutError extends Error {}

/** Bounds a store operation; the operation itself is not cancelled, its result is no longer awaited. */
export async function withTimeout<T>(
  operation: Promise<T>,
  policy: Pick<IdempotencyPolicy, 'storeTimeoutSeconds'>,
  what: string,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new StoreTimeoutError(`${what} took longer than storeTimeoutSeconds (${policy.storeTimeoutSeconds} s)`)),
      policy.storeTimeoutSeconds * 1000,
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
