import { Module } from '@nestjs/common';
import { APP_INTERCEPTOR, ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_STORE } from './idempotency.constants.js';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { ConfigurableIdempotencyModule, IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition.js';
import type { IdempotencyModuleOptions } from './idempotency-options.interface.js';
import { DEFAULT_TABLE_NAME } from './idempotency-policy.js';
import { IdempotencyService } from './idempotency.service.js';
import { PostgresIdempotencyStore } from './postgres-idempotency.store.js';

/**
 * `IdempotencyModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`: global by default,
 * registers the interceptor app-wide (routes opt in with `@Idempotent()`), and keeps its records on the
 * application's TypeORM data source (the default one, or the one named by `dataSource`).
 */
@Module({
  providers: [
    IdempotencyService,
    { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor },
    {
      provide: IDEMPOTENCY_STORE,
      inject: [IDEMPOTENCY_MODULE_OPTIONS, ModuleRef],
      useFactory: (options: IdempotencyModuleOptions, moduleRef: ModuleRef) =>
        new PostgresIdempotencyStore(
          moduleRef.get<DataSource>(getDataSourceToken(options.dataSource), { strict: false }),
          options.tableName ?? DEFAULT_TABLE_NAME,
        ),
    },
  ],
  exports: [IdempotencyService, IDEMPOTENCY_STORE],
})
export class IdempotencyModule extends ConfigurableIdempotencyModule {}
