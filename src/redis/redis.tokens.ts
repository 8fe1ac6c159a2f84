/** Injection token of `IdempotencyRedisModule`'s options (`IdempotencyRedisOptions`), as given. */
export const IDEMPOTENCY_REDIS_OPTIONS = Symbol('IDEMPOTENCY_REDIS_OPTIONS');

/** Injection token of the client the records live on, as the module provides it (`ProvidedRedisClient`). */
export const IDEMPOTENCY_REDIS_CLIENT = Symbol('IDEMPOTENCY_REDIS_CLIENT');
