// `nest-idempotency/redis`: the Redis store, on the application's own ioredis client (a `Redis` or a `Cluster`). An
// entry point of its own, so that an application on another store never loads ioredis (an optional peer dependency).

// The store's module (`IdempotencyModule.forRoot({ store: IdempotencyRedisModule.forRoot({ client }) })`), its options.
export { IdempotencyRedisModule } from './idempotency-redis.module.js';
export type { IdempotencyRedisOptions } from './idempotency-redis-options.interface.js';
export type { RedisClient } from './record-scripts.js';

// The store itself (for a module of your own), and what makes a server unfit for it.
export { RedisIdempotencyStore, type RedisStoreOptions } from './redis-idempotency.store.js';
export { MINIMUM_REDIS_VERSION, redisServerFaults } from './redis-server-check.js';

// An operator's look at the records: a key's record, the stuck ones, a fenced release (docs/operator.md).
export { RedisIdempotencyOperator } from './redis-operator.js';
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
