import { type ConfigurableModuleAsyncOptions, type DynamicModule, Logger, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, ModulesContainer } from '@nestjs/core';
import { HTTP_TRANSPORT_PROVIDERS } from './http/http-registration.js';
import { IdempotencyContext } from './protocol/idempotency-context.js';
import { IdempotencyInterceptor } from './protocol/idempotency.interceptor.js';
import { IdempotencyTransports } from './protocol/idempotency-transports.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
import type { IdempotencyStore } from './protocol/idempotency-store.interface.js';
import { ConfigurableIdempotencyModule, type IdempotencyModuleExtras } from './idempotency.module-definition.js';
import type { IdempotencyModuleOptions } from './idempotency-options.js';
import { IdempotencyService } from './protocol/idempotency.service.js';
import { IdempotencySetupError } from './protocol/idempotency-setup.error.js';
import { IdempotencyLifecycle } from './protocol/idempotency-lifecycle.js';
import { IdempotencyCompleter } from './protocol/idempotency-completer.js';
import { refuseTransactionalHandlers } from './protocol/transactional-handlers.js';

/** Marks the check below as done; nothing injects it, and Nest creates every provider at start-up. */
const ONE_MODULE_CHECKED = Symbol('ONE_MODULE_CHECKED');
/** Marks the warning below as given, once per application, as the check above. */
const PROCESS_LOCAL_WARNED = Symbol('PROCESS_LOCAL_WARNED');
/** Marks as done the refusal of transactional handlers on a store that runs none. */
const TRANSACTIONS_CHECKED = Symbol('TRANSACTIONS_CHECKED');

/** A store of this process's memory serves one instance: warned at start-up, naming the store to use instead. */
function warnIfProcessLocal(store: IdempotencyStore): boolean {
  if (!store.processLocal) return false;
  new Logger('Idempotency').warn(
    "IdempotencyModule keeps its records in this process's memory: they are not shared with the application's " +
      'other instances nor kept across a restart, so a retry that reaches another instance (or this one after a ' +
      'restart) runs again. Use it for tests and single-process tools; in production, a shared store ' +
      "(IdempotencyPostgresModule from 'nest-idempotency/postgres').",
  );
  return true;
}

/**
 * Each copy of the module registers its interceptor app-wide: with two, a request is claimed twice, and the inner
 * claim finds the outer one in progress (409), on every request. Nest makes two copies of `forRoot()` called twice
 * with different options.
 */
function refuseMoreThanOne(modules: ModulesContainer): true {
  const copies = [...modules.values()].filter(({ metatype }) => metatype === IdempotencyModule).length;
  if (copies > 1) {
    throw new IdempotencySetupError(
      `IdempotencyModule is imported ${copies} times with different options, and each copy would claim every ` +
        'request: call IdempotencyModule.forRoot() (or forRootAsync()) once, in the root module. It is global, so ' +
        'the other modules inject IdempotencyService without importing it; a route that needs other options says ' +
        'so in its @Idempotent().',
    );
  }
  return true;
}

/**
 * `IdempotencyModule.forRoot({ store, ...options })` / `forRootAsync({ store, imports, inject, useFactory })`: global
 * by default, registers the interceptor app-wide (routes opt in with `@Idempotent()`), and keeps its records in the
 * `store` it is given (a module that provides `IDEMPOTENCY_STORE`, or a store), which it knows only by that token.
 */
@Module({
  providers: [
    IdempotencyService,
    IdempotencyLifecycle,
    IdempotencyCompleter,
    IdempotencyContext,
    // The transports served, one per kind of call: HTTP's registration here; the others with their room's module.
    IdempotencyTransports,
    ...HTTP_TRANSPORT_PROVIDERS,
    { provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor },
    { provide: ONE_MODULE_CHECKED, inject: [ModulesContainer], useFactory: refuseMoreThanOne },
    { provide: PROCESS_LOCAL_WARNED, inject: [IDEMPOTENCY_STORE], useFactory: warnIfProcessLocal },
    {
      provide: TRANSACTIONS_CHECKED,
      inject: [ModulesContainer, IDEMPOTENCY_STORE, IDEMPOTENCY_MODULE_OPTIONS],
      useFactory: refuseTransactionalHandlers,
    },
  ],
  // The transports of other rooms' modules register in `IdempotencyTransports`, and read the module's options.
  exports: [
    IdempotencyService,
    IdempotencyCompleter,
    IdempotencyContext,
    IdempotencyTransports,
    IDEMPOTENCY_MODULE_OPTIONS,
  ],
})
export class IdempotencyModule {
  // The builder's methods, typed so that the compiler asks for `store` (which has no default), on this module.
  static forRoot(options: IdempotencyModuleOptions & IdempotencyModuleExtras): DynamicModule {
    return { ...ConfigurableIdempotencyModule.forRoot(options), module: IdempotencyModule };
  }

  static forRootAsync(
    options: ConfigurableModuleAsyncOptions<IdempotencyModuleOptions> & IdempotencyModuleExtras,
  ): DynamicModule {
    return { ...ConfigurableIdempotencyModule.forRootAsync(options), module: IdempotencyModule };
  }
}
