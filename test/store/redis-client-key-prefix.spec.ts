import { Cluster, Redis } from 'ioredis';
import { IdempotencySetupError } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/redis/index.js';

// Prefixes that would break the records' keys, refused when the store is made (at start-up, in a module): ioredis's own
// `keyPrefix` on the client, which it adds to keys but not to SCAN's patterns nor to channels (the operator would find
// no record, a fenced release would wake no waiter), and braces in the store's, which would make the prefix the hash
// tag of every record (one slot of a Cluster for all). Nothing connects: the clients are lazy and never used.

describe('The Redis store refuses key prefixes that break its keys', () => {
  const lazy = { lazyConnect: true };

  it.each([
    ['a Redis', () => new Redis({ ...lazy, keyPrefix: 'app:' })],
    ['a Cluster', () => new Cluster([], { lazyConnect: true, keyPrefix: 'app:' })],
    ["a Cluster's nodes", () => new Cluster([], { lazyConnect: true, redisOptions: { keyPrefix: 'app:' } })],
  ])("ioredis's own keyPrefix on %s, naming the store's keyPrefix as the fix", (_client, makeClient) => {
    const client = makeClient();
    try {
      expect(() => new RedisIdempotencyStore(client)).toThrow(IdempotencySetupError);
      expect(() => new RedisIdempotencyStore(client)).toThrow('keyPrefix: "app:"');
    } finally {
      client.disconnect();
    }
  });

  it.each(['{app}:', 'app{', 'a}pp:'])('a brace in the store keyPrefix %j', (keyPrefix) => {
    const client = new Redis(lazy);
    try {
      expect(() => new RedisIdempotencyStore(client, { keyPrefix })).toThrow(IdempotencySetupError);
      expect(() => new RedisIdempotencyStore(client, { keyPrefix })).toThrow('choose one without `{` or `}`');
      expect(() => new RedisIdempotencyStore(client, { keyPrefix: 'app:' })).not.toThrow();
    } finally {
      client.disconnect();
    }
  });
});
