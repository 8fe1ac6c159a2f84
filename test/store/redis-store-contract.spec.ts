import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import { describeIdempotencyStoreContract } from '../../src/testing/index.js';
import { describeWith } from '../support/required-service.js';
import { newRedisClient, redis } from '../support/redis.js';

// The contract every store passes, run against the Redis store on one Redis (real time, short leases), with its
// waits told on pub/sub and, where pub/sub is refused, by polling; and on a client that pipelines its commands
// (`enableAutoPipelining`, which many applications turn on). Each file's keys have a prefix of their own.

const prefix = `test:${randomBytes(4).toString('hex')}:`;
const clients = new Map<boolean, Redis>();

afterAll(async () => {
  await Promise.all([...clients.values()].map((client) => client.quit()));
});

const VARIANTS = [
  { outcomeWaits: 'pubsub', enableAutoPipelining: false },
  { outcomeWaits: 'polling', enableAutoPipelining: false },
  { outcomeWaits: 'pubsub', enableAutoPipelining: true },
] as const;

for (const { outcomeWaits, enableAutoPipelining } of VARIANTS) {
  const pipelined = enableAutoPipelining ? ', auto-pipelined' : '';
  describeWith(redis, `RedisIdempotencyStore, waits by ${outcomeWaits}${pipelined}`, () => {
    describeIdempotencyStoreContract(
      'RedisIdempotencyStore',
      async () => {
        let client = clients.get(enableAutoPipelining);
        if (!client) clients.set(enableAutoPipelining, (client = newRedisClient({ enableAutoPipelining })));
        const store = new RedisIdempotencyStore(client, { keyPrefix: prefix, outcomeWaits });
        return { store, cleanup: () => store.close() };
      },
      { transactions: false, expiresOnItsOwn: true, findsAbandoned: false },
    );
  });
}
