// `nest-idempotency/postgres`: the PostgreSQL store, on the application's TypeORM data source. An entry point of its
// own, so that an application on another store imports neither TypeORM nor `pg` (optional peer dependencies).

// The store's module (`IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot() })`), its options, and
// what transactional handlers write through.
export { IdempotencyPostgresModule } from './idempotency-postgres.module.js';
export type {
  IdempotencyPostgresModuleExtras,
  IdempotencyPostgresOptions,
} from './idempotency-postgres-options.interface.js';
export { PostgresIdempotencyContext } from './postgres-idempotency-context.js';
export type { PostgresStoreTransaction } from './postgres-store-transaction.js';
export { TransactionEscapeError } from './transaction-escape.subscriber.js';

// The store itself (for a module of your own), and its table: the entity and the migrations that create it.
export { PostgresIdempotencyStore, type PostgresStoreConnectionOptions } from './postgres-idempotency.store.js';
export { IdempotencyRecord } from './idempotency-record.entity.js';
export { idempotencyMigrations } from './migrations/idempotency-migrations.js';

// An operator's look at the table: a key's record, the stuck ones, a fenced release, the purge (docs/operator.md).
export { IdempotencyOperator, type OperatorQuery } from './idempotency-operator.js';
export type {
  IdempotencyOperations,
  OperatorReadOptions,
  OperatorRecord,
  OperatorRecordMatch,
  OperatorRecordState,
  OperatorReleaseOutcome,
  OperatorReleaseResult,
  OperatorStateCounts,
} from '../store-kit/operator-records.js';
