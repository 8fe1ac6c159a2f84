import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Test } from '@nestjs/testing';
import type { Cluster, Redis } from 'ioredis';
import { within } from '../../src/protocol/store-bounds.js';
import type { IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import {
  IdempotencyRedisModule,
  RedisIdempotencyOperator,
  RedisIdempotencyStore,
  type RedisClient,
} from '../../src/redis/index.js';
import { useRedisCluster } from '../support/redis-cluster.js';
import { newRedisClient, redis, redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { operatorStepsCases } from '../support/operator-steps-cases.js';

/**
 * The operator's tool on Redis, on records its store wrote on a real Redis (and on a local Redis Cluster): where each
 * record stands, the stuck ones, the counts, and the release fenced on the attempt the operator saw. Each file's keys
 * have a prefix of their own, so that its lists and counts see its records only.
 */

const prefix = `test:${randomBytes(4).toString('hex')}:operator:`;
const ENDPOINT = 'POST /v1/charges';
const LONG = { leaseSeconds: 60, ttlSeconds: 3600 };
/** A lease that has lapsed by the time the next line runs: 1 ms, and every case waits longer than that. */
const LAPSING = { leaseSeconds: 0.001, ttlSeconds: 3600 };
const OUTCOME: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from('{"id":"ch_1","amount":1200}'),
};

/** The records of one block: a store and its operator on one client and one prefix, and records made on them. */
function recordsOn(client: () => RedisClient, keyPrefix: string) {
  const store = () => new RedisIdempotencyStore(client(), { keyPrefix });
  return {
    operator: () => new RedisIdempotencyOperator(client(), { keyPrefix }),
    store,
    /** A record claimed by a new attempt (its token answered), completed with `OUTCOME` if asked. */
    async claimed(
      scope: IdempotencyScope,
      timing = LONG,
      { completed = false }: { completed?: boolean } = {},
    ): Promise<string> {
      const records = store();
      const attempt = randomUUID();
      expect(await records.claim(scope, 'fp', attempt, timing)).toMatchObject({ claimed: true });
      if (completed) expect(await records.complete({ scope, attempt }, OUTCOME, timing.ttlSeconds)).toBe(true);
      // Records made in one millisecond would be ordered by scope, not by creation.
      await delay(3);
      return attempt;
    },
  };
}

const scopeOf = (key: string, account = 'acct_a', endpoint = ENDPOINT): IdempotencyScope => ({
  account,
  endpoint,
  key,
});

let client: Redis | undefined;

afterAll(async () => {
  await client?.quit();
});

describeWith(redis, 'RedisIdempotencyOperator on one Redis', () => {
  const records = recordsOn(() => (client ??= newRedisClient()), prefix);
  const operator = () => records.operator();
  const keys = {
    running: `running-${randomUUID()}`,
    lapsed: `lapsed-${randomUUID()}`,
    olderLapsed: `older-lapsed-${randomUUID()}`,
    completed: `completed-${randomUUID()}`,
  };
  const attempts: Record<keyof typeof keys, string> = {} as never;

  beforeAll(async () => {
    attempts.olderLapsed = await records.claimed(scopeOf(keys.olderLapsed), LAPSING);
    attempts.running = await records.claimed(scopeOf(keys.running));
    attempts.lapsed = await records.claimed(scopeOf(keys.lapsed), LAPSING);
    attempts.completed = await records.claimed(scopeOf(keys.completed), LONG, { completed: true });
  });

  it('inspects a running record: its attempt, lease and expiry on Redis, nothing stored yet', async () => {
    const before = Date.now();
    const record = await operator().inspect(scopeOf(keys.running));
    expect(record).toEqual({
      account: 'acct_a',
      endpoint: ENDPOINT,
      key: keys.running,
      state: 'running',
      status: 'in_progress',
      attempt: attempts.running,
      attempts: 1,
      holderTransaction: false,
      awaited: false,
      createdAt: expect.any(Date),
      leaseUntil: expect.any(Date),
      completedAt: null,
      expiresAt: expect.any(Date),
      responseStatus: null,
      bodyBytes: null,
      steps: [],
    });
    // Redis's clock and this process's agree within a second or so on one machine.
    expect(record?.leaseUntil?.getTime()).toBeGreaterThan(before + 55_000);
    expect(record!.expiresAt.getTime() - record!.leaseUntil!.getTime()).toBe(3_600_000);
    expect(await operator().inspect(scopeOf(keys.running, 'acct_b'))).toBeUndefined();
  });

  it('inspects a record past its lease as lease-lapsed, and one taken over as its second attempt', async () => {
    expect(await operator().inspect(scopeOf(keys.lapsed))).toMatchObject({
      state: 'lease-lapsed',
      status: 'in_progress',
      attempt: attempts.lapsed,
    });
    const scope = scopeOf(`taken-over-${randomUUID()}`);
    await records.claimed(scope, LAPSING);
    const takeover = randomUUID();
    expect(await records.store().claim(scope, 'fp', takeover, LONG)).toEqual({ claimed: true, takeover: true });
    expect(await operator().inspect(scope)).toMatchObject({ state: 'running', attempt: takeover, attempts: 2 });
  });

  it('inspects a completed record: its status, body size and completion, the body only when asked', async () => {
    const record = await operator().inspect(scopeOf(keys.completed));
    expect(record).toMatchObject({
      state: 'completed',
      status: 'completed',
      leaseUntil: null,
      completedAt: expect.any(Date),
      responseStatus: 201,
      bodyBytes: OUTCOME.body.length,
    });
    expect(record).not.toHaveProperty('body');
    expect(record!.completedAt!.getTime()).toBeGreaterThanOrEqual(record!.createdAt.getTime());
    expect((await operator().inspect(scopeOf(keys.completed), { body: true }))?.body).toEqual(OUTCOME.body);
  });

  it('lists as stuck the records past their lease only, oldest first, within its limit', async () => {
    expect((await operator().stuck()).map(({ key }) => key)).toEqual([keys.olderLapsed, keys.lapsed]);
    expect((await operator().stuck({ limit: 1 })).map(({ key }) => key)).toEqual([keys.olderLapsed]);
  });

  it("finds a key's records across accounts and endpoints, newest first, or those of the account given", async () => {
    const key = `shared-${randomUUID()}`;
    await records.claimed(scopeOf(key, 'acct_a'));
    await records.claimed(scopeOf(key, 'acct_b', 'POST /v1/refunds'), LONG, { completed: true });
    const found = await operator().find({ key });
    expect(found.map(({ account, endpoint }) => [account, endpoint])).toEqual([
      ['acct_b', 'POST /v1/refunds'],
      ['acct_a', ENDPOINT],
    ]);
    expect(found.every((record) => record.body === undefined)).toBe(true);
    expect((await operator().find({ key, account: 'acct_a' })).map(({ account }) => account)).toEqual(['acct_a']);
    expect(await operator().find({ key, endpoint: 'DELETE /v1/charges' })).toEqual([]);
    expect(await operator().find({ key }, { limit: 1 })).toEqual([found[0]]);
    const [withBody] = await operator().find({ key, account: 'acct_b' }, { body: true });
    expect(withBody.body).toEqual(OUTCOME.body);
  });

  it('lists the records of one state, and none expired: an expired record is gone from Redis', async () => {
    const running = await operator().list('running');
    expect(running.length).toBeGreaterThan(0);
    expect(running.every(({ state }) => state === 'running')).toBe(true);
    expect((await operator().list('completed')).map(({ key }) => key)).toContain(keys.completed);
    expect(await operator().list('expired')).toEqual([]);
    const gone = scopeOf(`expiring-${randomUUID()}`);
    await records.claimed(gone, { leaseSeconds: 0.001, ttlSeconds: 0.01 });
    await delay(30);
    expect(await operator().inspect(gone)).toBeUndefined();
  });

  it('counts the records of each state, expired always 0', async () => {
    const counts = await operator().countByState();
    const listed = async (state: 'running' | 'lease-lapsed' | 'completed') =>
      (await operator().list(state, { limit: 1000 })).length;
    expect(counts).toEqual({
      running: await listed('running'),
      'lease-lapsed': await listed('lease-lapsed'),
      completed: await listed('completed'),
      expired: 0,
    });
    expect(counts['lease-lapsed']).toBeGreaterThanOrEqual(2);
  });

  it('releases only for the attempt that holds the record: another attempt, a completed record, a gone one are refused', async () => {
    const lapsed = scopeOf(`release-${randomUUID()}`);
    const attempt = await records.claimed(lapsed, LAPSING);
    const wrong = await operator().release(lapsed, randomUUID());
    expect(wrong).toEqual({ outcome: 'other-attempt', record: expect.objectContaining({ attempt }) });
    const completed = await operator().release(scopeOf(keys.completed), attempts.completed);
    expect(completed).toEqual({ outcome: 'completed', record: expect.objectContaining({ state: 'completed' }) });
    expect(await operator().inspect(scopeOf(keys.completed))).toMatchObject({ state: 'completed' });

    expect(await operator().release(lapsed, attempt)).toEqual({ outcome: 'released' });
    expect(await operator().inspect(lapsed)).toBeUndefined();
    expect(await operator().release(lapsed, attempt)).toEqual({ outcome: 'not-found' });
    // Free again: the next claim is a new one, not a takeover.
    expect(await records.store().claim(lapsed, 'fp', randomUUID(), LONG)).toEqual({ claimed: true, takeover: false });
  });

  it("releases a live lease too, and wakes the attempts waiting for the record on the store's channel", async () => {
    const scope = scopeOf(`awaited-${randomUUID()}`);
    const attempt = await records.claimed(scope);
    const waiting = records.store();
    expect(await waiting.markAwaited(scope)).toBe(true);
    const wait = waiting.waitForChange(scope, 60_000);
    try {
      await wait.listening;
      expect(await operator().inspect(scope)).toMatchObject({ state: 'running', awaited: true });
      expect(await operator().release(scope, attempt)).toEqual({ outcome: 'released' });
      await within(wait.changed, 10_000, () => new Error('still waiting 10 s after the release'));
    } finally {
      wait.cancel();
      await waiting.close();
    }
  });

  operatorStepsCases(() => ({
    store: records.store(),
    operator: operator(),
    newScope: () => scopeOf(`steps-${randomUUID()}`),
  }));

  it('lists only the records under its own prefix, read literally (glob characters in it are no wildcards)', async () => {
    const globbed = recordsOn(() => client as Redis, `${prefix}[glob]*?:`);
    const mine = scopeOf(`globbed-${randomUUID()}`);
    await globbed.claimed(mine, LAPSING);
    // `[glob]*?` as a pattern would match this prefix too.
    const lookalike = recordsOn(() => client as Redis, `${prefix}g-x:`);
    await lookalike.claimed(scopeOf(`lookalike-${randomUUID()}`), LAPSING);
    expect((await globbed.operator().stuck()).map(({ key }) => key)).toEqual([mine.key]);
    expect((await operator().stuck()).map(({ key }) => key)).not.toContain(mine.key);
  });

  it('is provided by IdempotencyRedisModule, on the client its factory made once and its key prefix', async () => {
    let made = 0;
    const moduleRef = await Test.createTestingModule({
      imports: [
        IdempotencyRedisModule.forRoot({
          // A client of the module's own, as a factory makes it: the module quits it when it closes.
          client: () => {
            made += 1;
            return newRedisClient();
          },
          keyPrefix: prefix,
        }),
      ],
    }).compile();
    try {
      const provided = moduleRef.get(RedisIdempotencyOperator);
      expect(await provided.inspect(scopeOf(keys.completed))).toMatchObject({ state: 'completed' });
      expect(made).toBe(1);
      expect(await provided.purgeExpired()).toBe(0);
    } finally {
      await moduleRef.close();
    }
  });
});

describeWith(redisCluster, 'RedisIdempotencyOperator on a Redis Cluster (records on every primary)', () => {
  const cluster = useRedisCluster({ masters: 3, replicasPerMaster: 0 });
  let clusterClient: Cluster | undefined;
  const records = recordsOn(() => (clusterClient ??= cluster.newClient()), prefix);
  const keys = Array.from({ length: 12 }, (_, index) => `spread-${index}-${randomUUID()}`);

  it('finds, lists, counts, inspects and releases records wherever their slots are', async () => {
    for (const key of keys) await records.claimed(scopeOf(key), LAPSING);
    const primaries = new Set(
      await Promise.all(keys.map((key) => cluster.masterOf(records.store().keyOf(scopeOf(key))))),
    );
    expect(primaries.size).toBe(3);
    const operator = records.operator();
    expect((await operator.stuck()).map(({ key }) => key)).toEqual(keys);
    expect(await operator.countByState()).toEqual({
      running: 0,
      'lease-lapsed': keys.length,
      completed: 0,
      expired: 0,
    });
    expect((await operator.find({ key: keys[5] }, { body: true })).map(({ key }) => key)).toEqual([keys[5]]);
    const record = await operator.inspect(scopeOf(keys[7]));
    expect(record).toMatchObject({ key: keys[7], state: 'lease-lapsed' });
    expect(await operator.release(scopeOf(keys[7]), record!.attempt)).toEqual({ outcome: 'released' });
    expect((await operator.stuck()).map(({ key }) => key)).toEqual(keys.filter((key) => key !== keys[7]));
  });
});
