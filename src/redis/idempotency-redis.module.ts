import { Module } from '@nestjs/common';
import { IDEMPOTENCY_STORE } from '../protocol/idempotency.tokens.js';
import type { IdempotencyRedisOptions } from './idempotency-redis-options.interface.js';
import { ConfigurableIdempotencyRedisModule } from './idempotency-redis.module-definition.js';
import { RedisIdempotencyStore } from './redis-idempotency.store.js';
import { RedisIdempotencyOperator } from './redis-operator.js';
import { type ProvidedRedisClient, provideRedisClient, RedisClientShutdown } from './redis-client-provision.js';
import { IDEMPOTENCY_REDIS_CLIENT, IDEMPOTENCY_REDIS_OPTIONS } from './redis.tokens.js';

/**
 * The Redis store, for `IdempotencyModule.forRoot({ store: IdempotencyRedisModule.forRoot({ client }), ... })`: keeps
 * the records on the application's ioredis client (a `Redis` or a `Cluster`), in standard mode; the module refuses
 * transactional handlers on it at start-up.
 */
@Module({
  providers: [
    { provide: IDEMPOTENCY_REDIS_CLIENT, inject: [IDEMPOTENCY_REDIS_OPTIONS], useFactory: provideRedisClient },
    {
      provide: IDEMPOTENCY_STORE,
      inject: [IDEMPOTENCY_REDIS_CLIENT, IDEMPOTENCY_REDIS_OPTIONS],
      useFactory: ({ client }: ProvidedRedisClient, { keyPrefix, outcomeWaits }: IdempotencyRedisOptions) =>
        new RedisIdempotencyStore(client, { keyPrefix, outcomeWaits }),
    },
    RedisClientShutdown,
    // The operator's look at the same records, on the store's client (made once, when a factory makes it).
    {
      provide: RedisIdempotencyOperator,
      inject: [IDEMPOTENCY_STORE, IDEMPOTENCY_REDIS_OPTIONS],
      useFactory: (store: RedisIdempotencyStore, { keyPrefix }: IdempotencyRedisOptions) =>
        new RedisIdempotencyOperator(store.client, { keyPrefix }),
    },
  ],
  exports: [IDEMPOTENCY_STORE, RedisIdempotencyOperator],
})
export class IdempotencyRedisModule extends ConfigurableIdempotencyRedisModule {}
