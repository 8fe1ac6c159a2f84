import { randomUUID } from 'node:crypto';
import { InMemoryIdempotencyStore, type IdempotencyScope, type StoredResponse } from '../../src/index.js';

// What the store contract (test/store/store-contract.spec.ts) does not cover: the in-memory store's own edges,
// each as the PostgreSQL store behaves.

const timing = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = { status: 201, headers: {}, body: Buffer.from('{}') };
let now = 0;
let store: InMemoryIdempotencyStore;
let scope: IdempotencyScope;

beforeEach(() => {
  now = Date.parse('2030-01-01T00:00:00Z');
  store = new InMemoryIdempotencyStore({ now: () => now });
  scope = { account: 'acct', endpoint: 'POST /x', key: randomUUID() };
});

async function claim(lease = timing) {
  const attempt = randomUUID();
  await expect(store.claim(scope, 'fp', attempt, lease)).resolves.toEqual({ claimed: true, takeover: false });
  return { scope, attempt };
}

it('runs on Date.now unless given a clock', async () => {
  const real = new InMemoryIdempotencyStore();
  const attempt = randomUUID();
  await real.claim(scope, 'fp', attempt, timing);
  await real.complete({ scope, attempt }, response, 60);
  const result = await real.claim(scope, 'fp', randomUUID(), timing);
  expect(
    result.claimed === false && result.existing.status === 'completed' && result.existing.expiresInSeconds,
  ).toBeCloseTo(60, 0);
});

it('refuses an attempt that is not a UUID, as the PostgreSQL column does', async () => {
  await expect(store.claim(scope, 'fp', 'attempt-1', timing)).rejects.toThrow(/uuid/);
  await expect(store.release({ scope, attempt: 'attempt-1' })).rejects.toThrow(/uuid/);
});

it('ends a transaction once: a commit after a commit or an abandon rejects, a rollback then does nothing', async () => {
  const held = await claim();
  const committed = await store.beginTransaction();
  await store.complete(held, response, 60, committed);
  await committed.commit();
  await expect(committed.commit()).rejects.toThrow(/already committed/);
  await expect(committed.rollback()).resolves.toBeUndefined();
  await expect(store.complete(held, response, 60, committed)).rejects.toThrow(/already committed/);

  const abandoned = await store.beginTransaction();
  expect(abandoned.connectionLost).toBe(false);
  abandoned.abandon();
  expect(abandoned.connectionLost).toBe(true);
  await expect(abandoned.commit()).rejects.toThrow(/already abandoned/);
  await expect(abandoned.rollback()).resolves.toBeUndefined();
});

it("refuses another store's transaction", async () => {
  const held = await claim();
  const foreign = await new InMemoryIdempotencyStore().beginTransaction();
  await expect(store.complete(held, response, 60, foreign)).rejects.toThrow(/another store/);
});

it('makes a renewal of a claim being completed in a transaction wait for it, then answer what it left', async () => {
  for (const ending of ['commit', 'rollback'] as const) {
    scope = { ...scope, key: randomUUID() };
    const held = await claim();
    const transaction = await store.beginTransaction();
    await store.complete(held, response, 60, transaction);
    let renewed: boolean | undefined;
    const renewing = store.renew(held, timing).then((result) => (renewed = result));
    await new Promise((resolve) => setImmediate(resolve));
    expect(renewed).toBeUndefined();
    await transaction[ending]();
    await renewing;
    expect(renewed).toBe(ending === 'rollback');
  }
});

it('skips, when purging, an expired record that a transaction is completing (as SKIP LOCKED does)', async () => {
  const held = await claim({ leaseSeconds: 1, ttlSeconds: 1 });
  now += 5_000;
  const transaction = await store.beginTransaction();
  await expect(store.complete(held, response, 60, transaction)).resolves.toBe(true);
  await expect(store.purgeExpired(10)).resolves.toBe(0);
  await transaction.commit();
  await expect(store.purgeExpired(10)).resolves.toBe(0);
  const result = await store.claim(scope, 'fp', randomUUID(), timing);
  expect(result).toMatchObject({ claimed: false, existing: { status: 'completed', expiresInSeconds: 60 } });
});

it('completes twice in one transaction only once: the transaction sees its own change', async () => {
  const held = await claim();
  const transaction = await store.beginTransaction();
  await expect(store.complete(held, response, 60, transaction)).resolves.toBe(true);
  await expect(store.complete(held, response, 60, transaction)).resolves.toBe(false);
  await transaction.commit();
});
