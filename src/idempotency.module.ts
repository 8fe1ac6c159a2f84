import { Module } from '@nestjs/common';
import { APP_INTERCEPTOR, ModulesContainer, Reflector } from '@nestjs/core';
import { IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
import { IDEMPOTENT_ROUTES_TRACKED } from './http/http.constants.js';
import { HttpPlatformCheck } from './http/http-platform-check.js';
import { DrainBeforeClose } from './http/drain-before-close.js';
import { trackIdempotentRoutes } from './http/idempotent-routes.js';
import { IdempotencyContext } from './idempotency-context.js';
import { IdempotencyInterceptor } from './http/idempotency.interceptor.js';
import { ConfigurableIdempotencyModule } from './idempotency.module-definition.js';
import { IdempotencyService } from './protocol/idempotency.service.js';
import { RunTransactionBinding } from './postgres/run-transaction-binding.js';

/**
 * `IdempotencyModule.forRoot(options)` / `forRootAsync({ imports, inject, useFactory })`: global by default,
 * registers the interceptor app-wide (routes opt in with `@Idempotent()`), and keeps its records on the
 * application's TypeORM data source (the default one, or the one named by `dataSource`). The record store
 * is provided under `IDEMPOTENCY_STORE`.
 */
@Module({
  providers: [
    IdempotencyService,
    IdempotencyContext,
    RunTransactionBinding,
    HttpPlatformCheck,
    DrainBeforeClose,
    { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor },
    { provide: IDEMPOTENT_ROUTES_TRACKED, inject: [ModulesContainer, Reflector], useFactory: trackIdempotentRoutes },
  ],
  exports: [IdempotencyService, IdempotencyContext, IDEMPOTENCY_STORE],
})
export class IdempotencyModule extends ConfigurableIdempotencyModule {}
