import type { RedisClient } from './record-scripts.js';
import type { RedisStoreOptions } from './redis-idempotency.store.js';

/** Options of `IdempotencyRedisModule.forRoot()` and `forRootAsync()`: the client the records live on, and their keys. */
export interface IdempotencyRedisOptions extends RedisStoreOptions {
  /**
   * The application's own ioredis client: a `Redis` (one server, or a primary found through Sentinel) or a `Cluster`,
   * or a function that makes it. The store sends its scripts on it, and makes one duplicate of it for pub/sub. A client
   * passed is the application's to close, after the application (whose shutdown still stores outcomes on it); one
   * made by the function is the module's, which quits it once the application has shut down (so the function makes
   * a client of its own, never returns one the application uses too).
   */
  client: RedisClient | (() => RedisClient);
}
