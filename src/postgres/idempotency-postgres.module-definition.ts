import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import type {
  IdempotencyPostgresModuleExtras,
  IdempotencyPostgresOptions,
} from './idempotency-postgres-options.interface.js';
import { IDEMPOTENCY_DATA_SOURCE, IDEMPOTENCY_POSTGRES_OPTIONS } from './postgres.tokens.js';

// Global, so that `PostgresIdempotencyContext` reaches every module, as the data source it stands for does.
export const { ConfigurableModuleClass: ConfigurableIdempotencyPostgresModule } =
  new ConfigurableModuleBuilder<IdempotencyPostgresOptions>({ optionsInjectionToken: IDEMPOTENCY_POSTGRES_OPTIONS })
    .setClassMethodName('forRoot')
    .setExtras<IdempotencyPostgresModuleExtras>({}, (definition, extras) => ({
      ...definition,
      global: true,
      providers: [...(definition.providers ?? []), dataSourceProvider(extras.dataSource)],
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

function missingDataSourceMessage(dataSourceName: string | undefined): string {
  if (dataSourceName !== undefined) {
    return (
      `IdempotencyPostgresModule was given \`dataSource: '${dataSourceName}'\`, but the application has no TypeORM ` +
      `data source of that name: pass the \`name\` given to \`TypeOrmModule.forRoot({ name, ... })\`.`
    );
  }
  return (
    'IdempotencyPostgresModule keeps its records on the default TypeORM data source, and the application has none: ' +
    "import `TypeOrmModule.forRoot(...)`, or, if the data source is named (`TypeOrmModule.forRoot({ name: 'billing', " +
    "... })`), pass its name: `IdempotencyPostgresModule.forRoot({ dataSource: 'billing' })`."
  );
}
