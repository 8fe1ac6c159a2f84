import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_DATA_SOURCE } from './postgres/postgres.tokens.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
import { IdempotencySetupError } from './protocol/idempotency-setup.error.js';
import type { IdempotencyModuleOptions } from './protocol/idempotency-options.interface.js';
import { resolveTableName } from './protocol/idempotency-policy.js';
import { PostgresIdempotencyStore } from './postgres/postgres-idempotency.store.js';

/** Options of `forRoot()` and `forRootAsync()` that shape the module itself, so they cannot come from a factory. */
export interface IdempotencyModuleExtras {
  /** Register the module globally. Default: `true`. */
  isGlobal?: boolean;
  /** Name of the TypeORM data source holding the records. Default: the default data source. */
  dataSource?: string;
}

// The protocol's own options token, so that the protocol reads its options without depending on this module (nor on
// its store).
export const { ConfigurableModuleClass: ConfigurableIdempotencyModule } =
  new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ optionsInjectionToken: IDEMPOTENCY_MODULE_OPTIONS })
    .setClassMethodName('forRoot')
    .setExtras<IdempotencyModuleExtras>({ isGlobal: true }, (definition, extras) => ({
      ...definition,
      global: extras.isGlobal,
      providers: [...(definition.providers ?? []), dataSourceProvider(extras.dataSource), postgresStoreProvider()],
    }))
    .build();

function dataSourceProvider(dataSourceName: string | undefined): Provider {
  return {
    provide: IDEMPOTENCY_DATA_SOURCE,
    // Optional, so that a missing data source is refused with the fix rather than Nest's unresolved dependency.
    inject: [{ token: getDataSourceToken(dataSourceName), optional: true }],
    useFactory: (dataSource: DataSource | undefined) => {
      if (!dataSource) throw new IdempotencySetupError(missingDataSourceMessage(dataSourceName));
      return dataSource;
    },
  };
}

function postgresStoreProvider(): Provider {
  return {
    provide: IDEMPOTENCY_STORE,
    inject: [IDEMPOTENCY_DATA_SOURCE, IDEMPOTENCY_MODULE_OPTIONS],
    useFactory: (dataSource: DataSource, options: IdempotencyModuleOptions) =>
      new PostgresIdempotencyStore(dataSource, resolveTableName(options)),
  };
}

function missingDataSourceMessage(dataSourceName: string | undefined): string {
  if (dataSourceName !== undefined) {
    return (
      `IdempotencyModule was given \`dataSource: '${dataSourceName}'\`, but the application has no TypeORM data source ` +
      `of that name: pass the \`name\` given to \`TypeOrmModule.forRoot({ name, ... })\`.`
    );
  }
  return (
    'IdempotencyModule keeps its records on the default TypeORM data source, and the application has none: import ' +
    "`TypeOrmModule.forRoot(...)`, or, if the data source is named (`TypeOrmModule.forRoot({ name: 'billing', ... })`), " +
    "pass its name beside the options: `IdempotencyModule.forRoot({ ..., dataSource: 'billing' })`."
  );
}
