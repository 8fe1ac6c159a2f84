import { ConfigurableModuleBuilder, type DynamicModule, type Provider, type Type } from '@nestjs/common';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
import { describedValue } from './protocol/described-value.js';
import { IdempotencySetupError } from './protocol/idempotency-setup.error.js';
import type { IdempotencyModuleOptions } from './idempotency-options.js';
import type { IdempotencyStore } from './protocol/idempotency-store.interface.js';

/**
 * Where the records live: a module that provides and exports `IDEMPOTENCY_STORE` (`IdempotencyPostgresModule.forRoot()`
 * from `nest-idempotency/postgres`, or a module of your own), or a store itself (`new InMemoryIdempotencyStore()`).
 */
export type IdempotencyStoreChoice = DynamicModule | Type | IdempotencyStore;

/** Options of `forRoot()` and `forRootAsync()` that shape the module itself, so they cannot come from a factory. */
export interface IdempotencyModuleExtras {
  /** Register the module globally. Default: `true`. */
  isGlobal?: boolean;
  /** Where the records live. Required: there is no default, so that no application keeps them where it did not mean to. */
  store: IdempotencyStoreChoice;
}

const MISSING_STORE =
  'IdempotencyModule needs to be told where its records live: `IdempotencyModule.forRoot({ store: ' +
  "IdempotencyPostgresModule.forRoot(), ... })` (from 'nest-idempotency/postgres', on your TypeORM data source), or " +
  '`store: new InMemoryIdempotencyStore()` for tests and single-process tools.';

// The protocol's own options token, so that the protocol reads its options without depending on this module (nor on
// its store).
export const { ConfigurableModuleClass: ConfigurableIdempotencyModule } =
  new ConfigurableModuleBuilder<IdempotencyModuleOptions>({ optionsInjectionToken: IDEMPOTENCY_MODULE_OPTIONS })
    .setClassMethodName('forRoot')
    // `store` has no default; a JavaScript caller that leaves it out is refused below.
    .setExtras<Partial<IdempotencyModuleExtras>>(
      // `store` is listed so that Nest keeps it out of the options it provides: it is wiring, not an option.
      { isGlobal: true, store: undefined },
      (definition, { isGlobal, store }) => {
        if (store === undefined || store === null) throw new IdempotencySetupError(MISSING_STORE);
        const storeModule = isStoreModule(store);
        if (typeof store === 'function') checkStoreClass(store);
        return {
          ...definition,
          global: isGlobal,
          // The store is exported as its module when it has one: Nest re-exports only what a module provides or imports.
          imports: [...(definition.imports ?? []), ...(storeModule ? [store] : [])],
          providers: [
            ...(definition.providers ?? []),
            ...(storeModule ? [] : [storeProvider(store)]),
            {
              provide: OPTIONS_OF_OTHER_ROOMS_REFUSED,
              inject: [IDEMPOTENCY_MODULE_OPTIONS],
              useFactory: refuseOptionsOfTheStore,
            },
            // A store module's store is known only once Nest has made it.
            ...(storeModule
              ? [{ provide: STORE_MODULE_CHECKED, inject: [IDEMPOTENCY_STORE], useFactory: checkStore }]
              : []),
          ],
          exports: [...(definition.exports ?? []), storeModule ? store : IDEMPOTENCY_STORE],
        };
      },
    )
    .build();

/** Marks the check of a store module's store as done; nothing injects it, and Nest creates every provider at start-up. */
const STORE_MODULE_CHECKED = Symbol('STORE_MODULE_CHECKED');

/** A store is told from anything else by its `claim` method, whichever way it was given. */
function isStore(value: unknown): value is IdempotencyStore {
  return typeof (value as Partial<IdempotencyStore> | null | undefined)?.claim === 'function';
}

function checkStore(store: unknown): true {
  if (!isStore(store)) {
    throw new IdempotencySetupError(
      `IDEMPOTENCY_STORE is not an IdempotencyStore (it has no claim method): got ${describedValue(store)}.`,
    );
  }
  return true;
}

/** Marks the check below as done; nothing injects it, and Nest creates every provider at start-up. */
const OPTIONS_OF_OTHER_ROOMS_REFUSED = Symbol('OPTIONS_OF_OTHER_ROOMS_REFUSED');

/** The PostgreSQL store's options, which `IdempotencyModule` took before 0.2.0. */
const POSTGRES_STORE_OPTIONS = ['tableName', 'dataSource', 'enlistDataSource', 'onTransactionEscape'];

/**
 * Options a factory returns are not checked by TypeScript: one that belongs elsewhere (a 0.1 configuration's
 * `enlistDataSource`, say) would be ignored without a word, so it refuses the start, saying where it goes.
 */
function refuseOptionsOfTheStore(options: object): true {
  const misplaced = POSTGRES_STORE_OPTIONS.filter((name) => name in options);
  if (misplaced.length > 0) {
    const names = misplaced.join(', ');
    throw new IdempotencySetupError(
      `IdempotencyModule got ${names}, which belong to the PostgreSQL store since 0.2.0: give them to ` +
        `\`store: IdempotencyPostgresModule.forRoot({ ${names} })\` (from 'nest-idempotency/postgres'), or to its ` +
        'forRootAsync() when they come from configuration.',
    );
  }
  return true;
}

/**
 * A class given as `store` is imported as a module. Two slips look alike to Nest's injector, which would answer them
 * with a missing provider: a store's class without `new`, and a configurable module without its `forRoot()`.
 */
function checkStoreClass(store: Type): void {
  if (isStore(store.prototype)) {
    throw new IdempotencySetupError(
      `IdempotencyModule's \`store\` is the class ${store.name}, not a store: give an instance, \`store: new ${store.name}()\`.`,
    );
  }
  if (typeof (store as Type & { forRoot?: unknown }).forRoot === 'function') {
    throw new IdempotencySetupError(
      `IdempotencyModule's \`store\` is the module ${store.name} itself, which is configured by its forRoot(): give ` +
        `\`store: ${store.name}.forRoot()\` (or its forRootAsync()).`,
    );
  }
}

function isStoreModule(store: IdempotencyStoreChoice): store is DynamicModule | Type {
  return typeof store === 'function' || (typeof store === 'object' && store !== null && 'module' in store);
}

function storeProvider(store: IdempotencyStore): Provider {
  if (!isStore(store)) {
    throw new IdempotencySetupError(`IdempotencyModule's \`store\` is neither a store nor a module. ${MISSING_STORE}`);
  }
  return { provide: IDEMPOTENCY_STORE, useValue: store };
}
