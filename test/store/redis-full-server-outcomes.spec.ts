import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import type { ClaimTiming, IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import { type LocalRedisServer, startRedisServer } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// docs/redis.md: "With `noeviction`, a full Redis refuses new claims instead (answered `503`), and never forgets an
// outcome." A claim admitted before the server filled up is an attempt whose handler runs: its outcome, the renewals
// of its lease and its waiters' marks must still be written, or the handler's work stands with its key in progress,
// and once memory frees (records expire) a retry takes the key over and runs the handler again. Redis refuses a
// script whose first write may grow memory, and lets the rest of one through once it has written: a claim writes
// with HSET first, the others with PEXPIREAT (record-scripts.ts).

const LONG: ClaimTiming = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = { status: 201, headers: {}, body: Buffer.from('{"id":"ch_1"}') };
const newScope = (): IdempotencyScope => ({ account: 'acct', endpoint: 'POST /charges', key: randomUUID() });

describeWith(redisCluster, 'The Redis store on a full server that never evicts', () => {
  let server: LocalRedisServer;
  let client: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    server = await startRedisServer([['maxmemory-policy', 'noeviction']]);
    client = new Redis(server.url);
    store = new RedisIdempotencyStore(client);
  });
  afterAll(async () => {
    await store.close();
    await client.quit().catch(() => client.disconnect());
    await server.stop();
  });

  /**
   * Makes the server full: its maxmemory set below what it uses. (Filling it with values until a write is refused, as
   * redis-outcome-waits.spec.ts does, leaves it hovering at the limit: the refused command's buffers freed, the next
   * command may pass.)
   */
  async function fill(): Promise<void> {
    const used = Number(/^used_memory:(\d+)/m.exec(await client.info('memory'))?.[1]);
    await client.config('SET', 'maxmemory', String(used - 256 * 1024));
    await expect(client.set('ballast', 'x')).rejects.toThrow(/^OOM/);
  }

  /** A claim made while the server had room, then the server full: the claim's handler runs now. */
  async function claimedThenFull(): Promise<{ scope: IdempotencyScope; attempt: string }> {
    await client.config('SET', 'maxmemory', '0');
    const scope = newScope();
    const attempt = randomUUID();
    expect(await store.claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
    await fill();
    // New claims are refused (the module answers 503 with Retry-After): what the docs promise.
    await expect(store.claim(newScope(), 'fp', randomUUID(), LONG)).rejects.toThrow(/^OOM/);
    return { scope, attempt };
  }

  // Refused, the module would answer the client 201, give up finalizing after its retries, and the key would run again
  // once memory frees.
  it('stores the outcome of an attempt claimed before the server filled up', async () => {
    const { scope, attempt } = await claimedThenFull();
    await expect(store.complete({ scope, attempt }, response, 600)).resolves.toBe(true);
    expect(await store.claim(scope, 'fp', randomUUID(), LONG)).toMatchObject({
      claimed: false,
      existing: { status: 'completed', response: { body: response.body } },
    });
  });

  // Refused, a handler longer than its lease would lose it, and a retry could take it over while it still runs.
  it('renews the lease of an attempt claimed before the server filled up', async () => {
    const { scope, attempt } = await claimedThenFull();
    await expect(store.renew({ scope, attempt }, LONG)).resolves.toBe(true);
  });

  it('marks a waiter on an attempt claimed before the server filled up, and still replays what it holds', async () => {
    const { scope, attempt } = await claimedThenFull();
    expect(await store.markAwaited(scope)).toBe(true);
    await store.complete({ scope, attempt }, response, 600);
    expect(await store.claim(scope, 'fp', randomUUID(), LONG)).toMatchObject({
      claimed: false,
      existing: { status: 'completed', response: { body: response.body } },
    });
  });
});
