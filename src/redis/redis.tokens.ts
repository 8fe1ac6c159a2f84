/** Injection token of `IdempotencyRedisModule`'s options (`IdempotencyRedisOptions`), as given. */
export const IDEMPOTENCY_REDIS_OPTIONS = Symbol('IDEMPOTENCY_REDIS_OPTIONS');
