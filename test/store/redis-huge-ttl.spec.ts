import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import type { IdempotencyScope } from '../../src/store/index.js';
import { type LocalRedisServer, startRedisServer } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// The module accepts any positive finite `ttlSeconds`. Redis turns a script's Lua number into a command argument with
// "%.17g": past 1e17 ms it is "1.0000179649221582e+17", which PEXPIREAT refuses after the record was written, leaving
// it in progress with no expiry for ever. The store refuses a lease or TTL past 1e12 s before it sends anything.

describeWith(redisCluster, 'The Redis store with a ttlSeconds past what "%.17g" prints as an integer', () => {
  let server: LocalRedisServer;
  let client: Redis;
  beforeAll(async () => {
    server = await startRedisServer();
    client = new Redis(server.url);
  });
  afterAll(async () => {
    await client.quit().catch(() => client.disconnect());
    await server.stop();
  });

  it('refuses a TTL past its bound before sending anything, and claims with an expiry within it', async () => {
    const store = new RedisIdempotencyStore(client);
    const scope = (): IdempotencyScope => ({ account: '', endpoint: 'POST /charges', key: randomUUID() });
    const huge = scope();
    await expect(store.claim(huge, 'fp', randomUUID(), { leaseSeconds: 60, ttlSeconds: 1e14 })).rejects.toThrow(
      'The Redis store keeps a record at most 1000000000000 s',
    );
    expect(await client.exists(store.keyOf(huge))).toBe(0);
    const long = scope();
    await store.claim(long, 'fp', randomUUID(), { leaseSeconds: 60, ttlSeconds: 1e12 });
    expect(await client.pttl(store.keyOf(long))).toBeGreaterThan(0);
    await store.close();
  });
});
