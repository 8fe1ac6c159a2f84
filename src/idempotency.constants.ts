/** Metadata key under which `@Idempotent()` stores its per-route options. */
export const IDEMPOTENT_METADATA = 'idempotency:idempotent';

/** Injection token of the record store (`IdempotencyStore`); override it to plug in another store. */
export const IDEMPOTENCY_STORE = Symbol('IDEMPOTENCY_STORE');

/** Methods that are already safe or naturally idempotent: they pass through even when they carry a key. */
export const PASS_THROUGH_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE']);

/**
 * Provider that wraps the handlers of idempotent routes while Nest creates the application (see
 * `trackIdempotentRoutes`); its value is how many it wrapped.
 */
export const IDEMPOTENT_ROUTES_TRACKED = Symbol('IDEMPOTENT_ROUTES_TRACKED');

/** Injection token of the TypeORM data source the module keeps its records on (the default one, or the one named by `dataSource`). */
export const IDEMPOTENCY_DATA_SOURCE = Symbol('IDEMPOTENCY_DATA_SOURCE');
