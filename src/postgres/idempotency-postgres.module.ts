import { type DynamicModule, Module } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_STORE } from '../protocol/idempotency.tokens.js';
import type {
  IdempotencyPostgresModuleExtras,
  IdempotencyPostgresOptions,
} from './idempotency-postgres-options.interface.js';
import { IdempotencyOperator } from './idempotency-operator.js';
import { ConfigurableIdempotencyPostgresModule } from './idempotency-postgres.module-definition.js';
import { PostgresIdempotencyContext } from './postgres-idempotency-context.js';
import { PostgresIdempotencyStore } from './postgres-idempotency.store.js';
import { type PostgresSettings, resolvePostgresSettings } from './postgres-options.js';
import {
  IDEMPOTENCY_DATA_SOURCE,
  IDEMPOTENCY_POSTGRES_OPTIONS,
  IDEMPOTENCY_POSTGRES_SETTINGS,
} from './postgres.tokens.js';
import { RunTransactionBinding } from './run-transaction-binding.js';

/**
 * The PostgreSQL store, for `IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), ... })`: keeps
 * the records on the application's TypeORM data source (the default one, or the one named by `dataSource`), binds
 * that data source to the transactions of transactional runs, gives handlers `PostgresIdempotencyContext`, and
 * operators `IdempotencyOperator` on the same table.
 */
@Module({
  providers: [
    {
      provide: IDEMPOTENCY_POSTGRES_SETTINGS,
      inject: [IDEMPOTENCY_POSTGRES_OPTIONS],
      useFactory: (options: IdempotencyPostgresOptions) => resolvePostgresSettings(options),
    },
    {
      provide: IDEMPOTENCY_STORE,
      inject: [IDEMPOTENCY_DATA_SOURCE, IDEMPOTENCY_POSTGRES_SETTINGS],
      useFactory: (dataSource: DataSource, settings: PostgresSettings) =>
        new PostgresIdempotencyStore(dataSource, settings.tableName, {
          transactionPooler: settings.transactionPooler,
          listenConnection: settings.listenConnection,
          batching: settings.batching,
        }),
    },
    {
      provide: IdempotencyOperator,
      inject: [IDEMPOTENCY_DATA_SOURCE, IDEMPOTENCY_POSTGRES_SETTINGS],
      useFactory: (dataSource: DataSource, settings: PostgresSettings) =>
        new IdempotencyOperator((text, values) => dataSource.query(text, values), settings.tableName),
    },
    RunTransactionBinding,
    PostgresIdempotencyContext,
  ],
  exports: [IDEMPOTENCY_STORE, PostgresIdempotencyContext, IdempotencyOperator],
})
export class IdempotencyPostgresModule extends ConfigurableIdempotencyPostgresModule {
  /** Every option has a default: `forRoot()` keeps the records in `idempotency_records` on the default data source. */
  static forRoot(options: IdempotencyPostgresOptions & IdempotencyPostgresModuleExtras = {}): DynamicModule {
    return super.forRoot(options);
  }
}
