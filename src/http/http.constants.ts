/** Methods that are already safe or naturally idempotent: they pass through even when they carry a key. */
export const PASS_THROUGH_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS', 'DELETE']);

/**
 * Provider that wraps the handlers of idempotent routes while Nest creates the application (see
 * `trackIdempotentRoutes`); its value is how many it wrapped.
 */
export const IDEMPOTENT_ROUTES_TRACKED = Symbol('IDEMPOTENT_ROUTES_TRACKED');
