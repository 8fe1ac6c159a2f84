import { InMemoryIdempotencyStore } from '../memory/in-memory-idempotency.store.js';
import { IDEMPOTENCY_STORE } from '../protocol/idempotency.tokens.js';

/**
 * What `useInMemoryIdempotencyStore` needs of Nest's `TestingModuleBuilder` (what `Test.createTestingModule()`
 * returns): `overrideProvider(token).useValue(value)`. Named by its shape, so that this entry point loads no
 * `@nestjs/testing` of its own.
 */
export interface ProviderOverriding<Builder> {
  overrideProvider(token: symbol): { useValue(value: unknown): Builder };
}

/** The in-memory store a testing module keeps its records in, and its clock. */
export interface InMemoryStoreUnderTest<Builder> {
  /** The builder, `IDEMPOTENCY_STORE` overridden: compile it. */
  builder: Builder;
  /** The store the application keeps its records in. */
  store: InMemoryIdempotencyStore;
  /**
   * Moves the store's clock `seconds` forward: leases lapse and records expire as if that time had passed. The
   * clock runs with the real one in between. Replays from memory (`replayCache`) are timed by the process's clock:
   * give the module `replayCache: false` in a test that expires records this way.
   */
  advanceTime(seconds: number): void;
}

/**
 * Overrides `IDEMPOTENCY_STORE` on a testing module with a new `InMemoryIdempotencyStore`, on a clock the test can
 * move forward, and returns that store. The application keeps its records in memory, with the PostgreSQL store's
 * rules; its idempotent routes and `IdempotencyService.execute()` run as they do in production:
 *
 * ```ts
 * import { Test } from '@nestjs/testing';
 * import { useInMemoryIdempotencyStore } from 'nest-idempotency/testing';
 *
 * const { builder, advanceTime } = useInMemoryIdempotencyStore(Test.createTestingModule({ imports: [AppModule] }));
 * const moduleRef = await builder.compile();
 * ```
 *
 * An application on the PostgreSQL store (`IdempotencyPostgresModule`) still needs a TypeORM data source object,
 * which may be one that never connects (docs/testing.md, "Testing with the in-memory store").
 */
export function useInMemoryIdempotencyStore<Builder extends ProviderOverriding<Builder>>(
  builder: Builder,
): InMemoryStoreUnderTest<Builder> {
  let offset = 0;
  const store = new InMemoryIdempotencyStore({ now: () => Date.now() + offset });
  return {
    builder: builder.overrideProvider(IDEMPOTENCY_STORE).useValue(store),
    store,
    advanceTime: (seconds) => {
      if (!Number.isFinite(seconds) || seconds < 0) {
        throw new RangeError(`advanceTime takes a number of seconds, 0 or more, got ${String(seconds)}`);
      }
      offset += seconds * 1000;
    },
  };
}
