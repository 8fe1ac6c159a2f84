/** Injection token of the record store (`IdempotencyStore`); override it to plug in another store. */
export const IDEMPOTENCY_STORE = Symbol('IDEMPOTENCY_STORE');

/** Injection token of the module's options (`ProtocolModuleOptions`), as `forRoot()` or its factory gave them. */
export const IDEMPOTENCY_MODULE_OPTIONS = Symbol('IDEMPOTENCY_MODULE_OPTIONS');

/** Metadata key under which `@Idempotent()` stores its per-handler options, which every transport reads. */
export const IDEMPOTENT_METADATA = 'idempotency:idempotent';
