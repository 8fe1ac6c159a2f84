import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import { describeIdempotencyStoreContract } from '../../src/testing/index.js';
import { describeWith } from '../support/required-service.js';
import { newRedisClient, redis } from '../support/redis.js';

// The contract every store passes, run against the Redis store on one Redis (real time, short leases), with its
// waits told on pub/sub and, where pub/sub is refused, by polling. Each file's keys have a prefix of their own.

const prefix = `test:${randomBytes(4).toString('hex')}:`;
let client: Redis | undefined;

afterAll(async () => {
  await client?.quit();
});

for (const outcomeWaits of ['pubsub', 'polling'] as const) {
  describeWith(redis, `RedisIdempotencyStore, waits by ${outcomeWaits}`, () => {
    describeIdempotencyStoreContract(
      'RedisIdempotencyStore',
      async () => {
        client ??= newRedisClient();
        const store = new RedisIdempotencyStore(client, { keyPrefix: prefix, outcomeWaits });
        return { store, cleanup: () => store.close() };
      },
      { transactions: false, expiresOnItsOwn: true },
    );
  });
}
