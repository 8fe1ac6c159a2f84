/** Injection token of the TypeORM data source the module keeps its records on (the default one, or the one named by `dataSource`). */
export const IDEMPOTENCY_DATA_SOURCE = Symbol('IDEMPOTENCY_DATA_SOURCE');
