/** Injection token of the TypeORM data source the records live on (the default one, or the one named by `dataSource`). */
export const IDEMPOTENCY_DATA_SOURCE = Symbol('IDEMPOTENCY_DATA_SOURCE');

/** Injection token of `IdempotencyPostgresModule`'s options (`IdempotencyPostgresOptions`), as given. */
export const IDEMPOTENCY_POSTGRES_OPTIONS = Symbol('IDEMPOTENCY_POSTGRES_OPTIONS');

/** Injection token of those options resolved and checked (`PostgresSettings`). */
export const IDEMPOTENCY_POSTGRES_SETTINGS = Symbol('IDEMPOTENCY_POSTGRES_SETTINGS');
