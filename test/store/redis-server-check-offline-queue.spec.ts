import { Redis } from 'ioredis';
import { IdempotencySetupError } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import { type LocalRedisServer, startRedisServer } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// The start-up check of the server (docs/redis.md, "What it refuses at start-up": any maxmemory-policy but
// noeviction) is sent at once on the application's client. A client made with `enableOfflineQueue: false` (with
// `lazyConnect: true`, or simply not connected yet when Nest initialises the module) rejects it with "Stream isn't
// writeable and enableOfflineQueue options is false", which the module takes for "the server cannot be reached now"
// and only logs as a warning: the application starts, and serves claims, on a server that may evict its records.

describeWith(redisCluster, 'The Redis server check on a client without an offline queue', () => {
  let server: LocalRedisServer;
  beforeAll(async () => {
    server = await startRedisServer([['maxmemory-policy', 'allkeys-lru']]);
  });
  afterAll(async () => {
    await server.stop();
  });

  it.each([
    ['lazyConnect: true, enableOfflineQueue: false', { lazyConnect: true, enableOfflineQueue: false }],
    ['enableOfflineQueue: false', { enableOfflineQueue: false }],
  ])('refuses an evicting server on a client made with %s', async (_name, options) => {
    const client = new Redis(server.url, options);
    client.on('error', () => undefined);
    const store = new RedisIdempotencyStore(client);
    try {
      // Before the client connects, it would reject with "Stream isn't writeable", taken as a server not reached.
      await expect(store.checkSchema()).rejects.toThrow(IdempotencySetupError);
      // The server is reachable all along: the store's first claim on that client succeeds a moment later.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(await client.ping()).toBe('PONG');
    } finally {
      await store.close();
      client.disconnect();
    }
  });
});
