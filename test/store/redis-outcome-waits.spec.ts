import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import type { ClaimTiming, IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import { IdempotencySetupError } from '../../src/index.js';
import { type LocalRedisServer, startRedisServer } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// The Redis store on servers of the test's own, set up as the shared one must not be: its subscriber connection cut
// while a request waits, pub/sub refused by the server, and the servers it refuses at start-up.

const LONG: ClaimTiming = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = { status: 201, headers: {}, body: Buffer.from('ok') };
const newScope = (): IdempotencyScope => ({ account: 'acct', endpoint: 'POST /charges', key: randomUUID() });
/** Far past what waking takes (milliseconds), far below the wait's own timeout (30 s): a wait ended by it is a bug. */
const WAKE_BOUND_MS = 5_000;

/** Whether `changed` settles within `ms`. */
async function settlesWithin(changed: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const settled = await Promise.race([changed.then(() => true), late]);
  clearTimeout(timer);
  return settled;
}

describeWith(redisCluster, 'The Redis store on servers of its own', () => {
  const servers: LocalRedisServer[] = [];
  const clients: Redis[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((client) => client.quit().catch(() => client.disconnect())));
    await Promise.all(servers.map((server) => server.stop()));
  });

  async function storeOn(settings: Parameters<typeof startRedisServer>[0] = []) {
    const server = await startRedisServer(settings);
    servers.push(server);
    const client = new Redis(server.url);
    clients.push(client);
    return { server, client, store: new RedisIdempotencyStore(client) };
  }

  it('wakes a wait whose subscriber connection was cut: subscribed again, it hears the outcome stored after', async () => {
    const { client, store } = await storeOn();
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, LONG);
    try {
      const first = store.waitForChange(scope, 30_000);
      await first.listening;
      expect(await client.client('KILL', 'TYPE', 'pubsub')).toBe(1);
      // The cut wakes the wait (what was published meanwhile is lost); its request claims again and waits again.
      expect(await settlesWithin(first.changed, WAKE_BOUND_MS)).toBe(true);
      const second = store.waitForChange(scope, 30_000);
      await second.listening;
      expect(await store.markAwaited(scope)).toBe(true);
      expect(await store.complete({ scope, attempt }, response, 60)).toBe(true);
      expect(await settlesWithin(second.changed, WAKE_BOUND_MS)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('polls the record when the server refuses pub/sub', async () => {
    const { store } = await storeOn([['rename-command', 'SUBSCRIBE', '']]);
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, LONG);
    try {
      const waiting = store.waitForChange(scope, 30_000);
      await waiting.listening;
      expect(await store.markAwaited(scope)).toBe(true);
      expect(await settlesWithin(waiting.changed, 300)).toBe(false);
      expect(await store.release({ scope, attempt })).toBe(true);
      expect(await settlesWithin(waiting.changed, WAKE_BOUND_MS)).toBe(true);
      expect(await store.checkHealth(5_000, { listen: true })).toEqual({ listening: false });
    } finally {
      await store.close();
    }
  });

  it.each(['allkeys-lru', 'volatile-ttl'])(
    'refuses at start-up a server whose maxmemory-policy is %s, naming it and the fix',
    async (policy) => {
      const { server, store } = await storeOn([['maxmemory-policy', policy]]);
      const checking = store.checkSchema();
      await expect(checking).rejects.toThrow(IdempotencySetupError);
      await expect(checking).rejects.toThrow(`The Redis at 127.0.0.1:${server.port} cannot keep idempotency records`);
      await expect(checking).rejects.toThrow(`its maxmemory-policy is ${policy}`);
      await expect(checking).rejects.toThrow('set `maxmemory-policy noeviction`');
    },
  );

  it('starts on a server that never evicts', async () => {
    const { store } = await storeOn([['maxmemory-policy', 'noeviction']]);
    await expect(store.checkSchema()).resolves.toBeUndefined();
  });
});
