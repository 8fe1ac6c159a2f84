import { randomBytes, randomUUID } from 'node:crypto';
import type { Cluster } from 'ioredis';
import type { ClaimTiming, IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import { describeIdempotencyStoreContract } from '../../src/testing/index.js';
import { useRedisCluster } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// The Redis store on a local Redis Cluster of three masters, each with a replica: the contract every store passes,
// then what docs/deployments.md promises of a failover and of a node's restart while attempts are in flight.

const LONG: ClaimTiming = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = { status: 201, headers: { 'content-type': 'text/plain' }, body: Buffer.from('ok') };
const newScope = (): IdempotencyScope => ({ account: 'acct', endpoint: 'POST /charges', key: randomUUID() });

describeWith(redisCluster, 'RedisIdempotencyStore on a Redis Cluster', () => {
  const prefix = `test:${randomBytes(4).toString('hex')}:`;
  let client: Cluster;
  let store: RedisIdempotencyStore;
  // Before the cluster stops (Jest runs a block's afterAll hooks in the order they are declared): a subscriber left
  // open would look for a node to subscribe on for ever.
  afterAll(() => store.close());
  const cluster = useRedisCluster();

  beforeAll(() => {
    client = cluster.newClient();
    store = new RedisIdempotencyStore(client, { keyPrefix: prefix });
  });

  describeIdempotencyStoreContract(
    'RedisIdempotencyStore on a Redis Cluster',
    async () => {
      const store = new RedisIdempotencyStore(client, { keyPrefix: prefix });
      return { store, cleanup: () => store.close() };
    },
    { transactions: false, expiresOnItsOwn: true, findsAbandoned: false },
  );

  it('spreads records over the masters, each record in one slot', async () => {
    const masters = new Set<number>();
    for (let i = 0; i < 24; i += 1) {
      const scope = newScope();
      await store.claim(scope, 'fp', randomUUID(), LONG);
      masters.add(await cluster.masterOf(store.keyOf(scope)));
    }
    expect(masters.size).toBe(3);
  });

  it('keeps an attempt in flight across a failover of its master: still held, completed by its holder, replayed, its waiter woken', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, LONG);
    const waiting = store.waitForChange(scope, 30_000);
    await waiting.listening;
    expect(await store.markAwaited(scope)).toBe(true);
    const before = await cluster.masterOf(store.keyOf(scope));

    const after = await cluster.failover(before);

    expect(await cluster.masterOf(store.keyOf(scope))).toBe(after);
    expect(await store.claim(scope, 'fp', randomUUID(), LONG)).toEqual({
      claimed: false,
      existing: { status: 'in_progress', fingerprint: 'fp' },
    });
    expect(await store.complete({ scope, attempt }, response, 60)).toBe(true);
    await waiting.changed;
    const replay = await store.claim(scope, 'fp', randomUUID(), LONG);
    expect(replay).toMatchObject({ claimed: false, existing: { status: 'completed', response: { status: 201 } } });
  });

  it.each(['SIGTERM', 'SIGKILL'] as const)(
    'rides out a master stopped by %s under load: it answers again once its replica took over, and keeps every record acknowledged and replicated, held or completed',
    async (signal) => {
      // The attempt in flight on the master that stops, replicated before it stops: still held after.
      const held = newScope();
      await store.claim(held, 'fp', randomUUID(), LONG);
      await replicated(store.keyOf(held));
      const master = await cluster.masterOf(store.keyOf(held));

      // Attempts run without pause, each claimed, completed, and replicated (`WAIT`) before it counts as done.
      const done: IdempotencyScope[] = [];
      let stopping = false;
      const load = (async () => {
        while (!stopping) {
          const scope = newScope();
          const attempt = randomUUID();
          const claim = await store.claim(scope, 'fp', attempt, LONG).catch(() => undefined); // the master away
          if (claim === undefined) continue;
          if (!claim.claimed) throw new Error(`a new key was not claimed: ${JSON.stringify(claim)}`);
          const completed = await store.complete({ scope, attempt }, response, 600).catch(() => undefined);
          if (completed === false) throw new Error('a claim was lost before its outcome');
          if (completed && (await replicated(store.keyOf(scope)).catch(() => false))) done.push(scope);
        }
      })();
      await waitForCount(() => done.length, 20);

      await cluster.restart(master, { signal });
      await waitForCount(() => done.length, done.length + 20);
      stopping = true;
      await load;

      expect(await store.claim(held, 'another request', randomUUID(), LONG)).toEqual({
        claimed: false,
        existing: { status: 'in_progress', fingerprint: 'fp' },
      });
      for (const scope of done) {
        expect(await store.claim(scope, 'fp', randomUUID(), LONG)).toMatchObject({
          claimed: false,
          existing: { status: 'completed' },
        });
      }
    },
    90_000,
  );

  /** Whether the replica of `key`'s master has every write made so far on the client's connection to that master. */
  async function replicated(key: string): Promise<boolean> {
    const port = await cluster.masterOf(key);
    const master = client.nodes('master').find((node) => node.options.port === port);
    if (!master) return false;
    return (await master.wait(1, 1_000)) >= 1;
  }
});

/** Resolves once `count()` reaches `target`, for at most 30 s. */
async function waitForCount(count: () => number, target: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (count() < target) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${target} attempts done (${count()} so far)`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
