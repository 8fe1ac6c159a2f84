import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { PoolClient } from 'pg';
import { DataSource } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import type { ClaimResult, IdempotencyScope, StoreTransaction } from '../../src/store/index.js';
import { idempotencyMigrations, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { holdLock, waitingForLock } from '../support/hold-lock.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

// Claims, outcomes and releases of standard attempts made at the same moment go out as one statement: each caller
// still gets its own record's answer, whatever the others in its batch are, and a statement that fails fails each of
// its callers, claiming nothing. One statement in flight at a time here, so that a burst is one batch after the first.

const TIMING = { leaseSeconds: 30, ttlSeconds: 3600 };
const response = (body: string) => ({
  status: 201,
  headers: { 'content-type': 'text/plain' },
  body: Buffer.from(body),
});

let db: TestDatabase;
let dataSource: DataSource;
let store: PostgresIdempotencyStore;

beforeAll(async () => {
  db = await createTestDatabase();
  dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: idempotencyMigrations() });
  await dataSource.initialize();
  await dataSource.runMigrations();
  store = new PostgresIdempotencyStore(dataSource, 'idempotency_records', {
    batching: { maxBatchSize: 64, maxInFlight: 1 },
  });
});

afterAll(async () => {
  await store?.close();
  await dataSource?.destroy();
  await db?.drop();
});

const scopeOf = (key: string, account = 'acct_1'): IdempotencyScope => ({ account, endpoint: 'POST /charges', key });

/** Runs `burst`, and says how many statements the store (`of`, the file's by default) sent for it. */
async function counted<T>(burst: () => Promise<T>, of = store): Promise<{ result: T; statements: number }> {
  const before = of.statementsSent;
  const result = await burst();
  return { result, statements: of.statementsSent - before };
}

/**
 * Runs `test` with a store of its own on a data source whose connections start with a `statement_timeout` shorter
 * than the batches' lock bound, as an application's may.
 */
async function withShortStatementTimeout(test: (short: PostgresIdempotencyStore) => Promise<void>): Promise<void> {
  const application = new DataSource({ type: 'postgres', url: db.url, extra: { options: '-c statement_timeout=300' } });
  await application.initialize();
  const short = new PostgresIdempotencyStore(application, 'idempotency_records', {
    batching: { maxBatchSize: 64, maxInFlight: 1 },
  });
  try {
    await test(short);
  } finally {
    await short.close();
    await application.destroy();
  }
}

async function claimed(scope: IdempotencyScope, fingerprint = 'fp') {
  const attempt = randomUUID();
  const result = await store.claim(scope, fingerprint, attempt, TIMING);
  expect(result.claimed).toBe(true);
  return { scope, attempt };
}

it('answers every claim of one statement with its own record: new, replay, in progress, reused, another tenant', async () => {
  const completed = await claimed(scopeOf('completed'));
  await store.complete(completed, response('charged'), 3600);
  await claimed(scopeOf('running'));
  await claimed(scopeOf('tenant'), 'fp-of-acct-1');

  const claims: Array<[string, IdempotencyScope, string]> = [
    ['first of the burst, alone', scopeOf(`new-${randomUUID()}`), 'fp'],
    ['new', scopeOf(`new-${randomUUID()}`), 'fp'],
    ['replay', scopeOf('completed'), 'fp'],
    ['in progress', scopeOf('running'), 'fp'],
    ['reused after completion', scopeOf('completed'), 'another'],
    ['reused while running', scopeOf('running'), 'another'],
    ["another tenant's same key", scopeOf('tenant', 'acct_2'), 'fp-of-acct-2'],
    ['another new', scopeOf(`new-${randomUUID()}`), 'fp'],
  ];
  const { result, statements } = await counted(() =>
    Promise.all(claims.map(([, scope, fingerprint]) => store.claim(scope, fingerprint, randomUUID(), TIMING))),
  );
  // The first claim goes out alone; the others, made while it is in flight, together (two of a scope twice apart).
  expect(statements).toBeLessThanOrEqual(4);
  const answers = Object.fromEntries(claims.map(([name], index) => [name, summary(result[index])]));
  expect(answers).toEqual({
    'first of the burst, alone': 'claimed',
    new: 'claimed',
    replay: 'completed fp charged',
    'in progress': 'in_progress fp',
    'reused after completion': 'completed fp charged',
    'reused while running': 'in_progress fp',
    "another tenant's same key": 'claimed',
    'another new': 'claimed',
  });
});

it('a burst of one new scope goes out in as many statements: the first claims it, the others find it in progress', async () => {
  const scope = scopeOf(`same-${randomUUID()}`);
  // The first claim of the burst, of another scope, goes out alone: the new scope's claims all wait behind it.
  const [, ...results] = await Promise.all([
    store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING),
    ...Array.from({ length: 5 }, () => store.claim(scope, 'fp', randomUUID(), TIMING)),
  ]);
  expect(results.map(summary).sort()).toEqual([
    'claimed',
    'in_progress fp',
    'in_progress fp',
    'in_progress fp',
    'in_progress fp',
  ]);
});

it('takes over a lapsed claim of the same request in a batch, and never a live one', async () => {
  const lapsed = scopeOf(`lapsed-${randomUUID()}`);
  const live = scopeOf(`live-${randomUUID()}`);
  await store.claim(lapsed, 'fp', randomUUID(), { leaseSeconds: 0.001, ttlSeconds: 3600 });
  await claimed(live);
  await db.query('SELECT pg_sleep(0.01)');
  const [lapsedAgain, liveAgain, other] = await Promise.all([
    store.claim(lapsed, 'fp', randomUUID(), TIMING),
    store.claim(live, 'fp', randomUUID(), TIMING),
    store.claim(scopeOf(`other-${randomUUID()}`), 'fp', randomUUID(), TIMING),
  ]);
  expect(lapsedAgain).toEqual({ claimed: true, takeover: true });
  expect(summary(liveAgain)).toBe('in_progress fp');
  expect(other).toEqual({ claimed: true, takeover: false });
});

it("claims of transactional attempts share a statement, each with its holder's lock: a dead holder's record is taken over at once, a live one's never", async () => {
  const holding = async (scope: IdempotencyScope) => (await store.beginHoldingTransaction(scope)) as StoreTransaction;
  const [live, dead, fresh] = ['live', 'dead', 'fresh'].map((name) => scopeOf(`${name}-${randomUUID()}`));
  const liveHolder = await holding(live);
  const deadHolder = await holding(dead);
  await store.claim(live, 'fp', randomUUID(), TIMING, liveHolder);
  await store.claim(dead, 'fp', randomUUID(), TIMING, deadHolder);
  await deadHolder.rollback(); // its lock is gone with it; its lease has 30 s left
  const holders = await Promise.all([holding(live), holding(dead), holding(fresh)]);
  try {
    const { result, statements } = await counted(() =>
      Promise.all([
        store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING), // goes out alone
        ...[live, dead, fresh].map((scope, index) => store.claim(scope, 'fp', randomUUID(), TIMING, holders[index])),
      ]),
    );
    expect(statements).toBe(2);
    const [, liveAgain, deadAgain, freshClaim] = result;
    expect([summary(liveAgain), deadAgain, freshClaim]).toEqual([
      'in_progress fp',
      { claimed: true, takeover: true },
      { claimed: true, takeover: false },
    ]);
    // The records claimed are held by their holders' locks: a crash of either frees them at once, as before.
    const rows = await db.query<{ lock_held: boolean }>(
      'SELECT lock_held FROM idempotency_records WHERE idempotency_key = ANY($1)',
      [[live, dead, fresh].map(({ key }) => key)],
    );
    expect(rows.map(({ lock_held }) => lock_held)).toEqual([true, true, true]);
  } finally {
    await Promise.all([liveHolder, ...holders].map((holder) => holder.rollback()));
  }
});

it("a batched claim whose holder ends while the statement waits on another record never takes over the retry's live claim", async () => {
  const holding = async (on: PostgresIdempotencyStore, scope: IdempotencyScope) =>
    (await on.beginHoldingTransaction(scope)) as StoreTransaction;
  const [blocker, target] = [scopeOf(`a-blocker-${randomUUID()}`), scopeOf(`b-target-${randomUUID()}`)];
  // The target is in progress, held by a holder that died (its lease has 30 s left); the blocker's lease has lapsed,
  // so the batch goes for its row, which a long transaction holds.
  const dead = await holding(store, target);
  await store.claim(target, 'fp', randomUUID(), TIMING, dead);
  await dead.rollback();
  await store.claim(blocker, 'fp', randomUUID(), { leaseSeconds: 0.001, ttlSeconds: 3600 });
  await db.query('SELECT pg_sleep(0.01)');
  const other = new PostgresIdempotencyStore(dataSource, 'idempotency_records', {
    batching: { maxBatchSize: 64, maxInFlight: 1 },
  });
  const lateHolder = await holding(store, target); // alive as its claim's statement begins
  const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [
    blocker.key,
  ]);
  let retryHolder: StoreTransaction | undefined;
  try {
    const lateAttempt = randomUUID();
    const [, , late] = [
      store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING), // goes out alone
      store.claim(blocker, 'fp', randomUUID(), TIMING),
      store.claim(target, 'fp', lateAttempt, TIMING, lateHolder), // one batch with the blocker, after it
    ];
    await waitFor(waitingForLock(db, '%$5::uuid[], $6::float8[]%'), 'the batch to wait for the blocker');
    // The late claim's request is refused meanwhile: its holder rolled back, the retry's (another instance) takes
    // the lock and the record.
    await lateHolder.rollback();
    retryHolder = await holding(other, target);
    const retryAttempt = randomUUID();
    await expect(other.claim(target, 'fp', retryAttempt, TIMING, retryHolder)).resolves.toEqual({
      claimed: true,
      takeover: true,
    });
    await lock.letGo();
    await expect(late).resolves.toEqual({ claimed: false, existing: { status: 'in_progress', fingerprint: 'fp' } });
    const [record] = await db.query<{ attempt: string }>(
      'SELECT attempt FROM idempotency_records WHERE idempotency_key = $1',
      [target.key],
    );
    expect(record.attempt).toBe(retryAttempt);
  } finally {
    await lock.letGo();
    await retryHolder?.rollback();
    await other.close();
  }
});

it('a statement that fails by no fault of its items fails each claim of its batch, and claims none of them', async () => {
  const scopes = [scopeOf(`alone-${randomUUID()}`), scopeOf(`a-${randomUUID()}`), scopeOf(`b-${randomUUID()}`)];
  // The table gone for a moment (a fault of the database, not of a record): the first claim's statement and the
  // batch of the two made meanwhile fail as a whole.
  await db.query('ALTER TABLE idempotency_records RENAME TO idempotency_records_away');
  let results: PromiseSettledResult<ClaimResult>[];
  try {
    results = await Promise.allSettled(scopes.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)));
  } finally {
    await db.query('ALTER TABLE idempotency_records_away RENAME TO idempotency_records');
  }
  expect(results.map(({ status }) => status)).toEqual(['rejected', 'rejected', 'rejected']);
  const rows = await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = ANY($1)', [
    scopes.map(({ key }) => key),
  ]);
  expect(rows).toHaveLength(0);
  // Claimed again, each is claimed once.
  const again = await Promise.all(scopes.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)));
  expect(again).toEqual(scopes.map(() => ({ claimed: true, takeover: false })));
});

it('an item the table refuses (an attempt id that is no uuid) fails its own claim; the others of its batch are claimed', async () => {
  const batched = [scopeOf(`a-${randomUUID()}`), scopeOf(`b-${randomUUID()}`)];
  const [, bad, ...others] = await Promise.allSettled([
    store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING),
    store.claim(scopeOf(`bad-${randomUUID()}`), 'fp', 'not-a-uuid', TIMING),
    ...batched.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)),
  ]);
  expect(bad.status).toBe('rejected');
  expect(others).toEqual(batched.map(() => ({ status: 'fulfilled', value: { claimed: true, takeover: false } })));
});

it('stores and releases the outcomes of one statement each for its own attempt; a fenced one fails only itself', async () => {
  const [a, b, c, d] = await Promise.all(
    ['a', 'b', 'c', 'd'].map((name) => claimed(scopeOf(`${name}-${randomUUID()}`))),
  );
  const { result: completes, statements } = await counted(() =>
    Promise.all([
      store.complete(a, response('a'), 3600),
      store.complete(b, response('b'), 3600),
      store.complete({ scope: c.scope, attempt: randomUUID() }, response('not c'), 3600), // fenced: another attempt
      store.complete(c, response('c'), 3600),
    ]),
  );
  expect(completes).toEqual([true, true, false, true]);
  expect(statements).toBeLessThanOrEqual(3);
  const stored = await db.query<{ idempotency_key: string; body: string }>(
    "SELECT idempotency_key, convert_from(response_body, 'UTF8') AS body FROM idempotency_records WHERE idempotency_key = ANY($1) ORDER BY body",
    [[a, b, c].map(({ scope }) => scope.key)],
  );
  expect(stored.map(({ body }) => body)).toEqual(['a', 'b', 'c']);

  const releases = await Promise.all([
    store.release(d),
    store.release({ scope: a.scope, attempt: a.attempt }), // completed: nothing to release
    store.release({ scope: d.scope, attempt: randomUUID() }),
  ]);
  expect(releases).toEqual([true, false, false]);
  const left = await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [d.scope.key]);
  expect(left).toHaveLength(0);
});

it('a waiter on a record completed in a batch is woken, as by a completion of its own', async () => {
  const running = await claimed(scopeOf(`awaited-${randomUUID()}`));
  expect(await store.markAwaited(running.scope)).toBe(true);
  // Its own timeout far off: only the notification ends the wait within the bound.
  const wait = store.waitForChange(running.scope, 60_000);
  await wait.listening;
  const other = await claimed(scopeOf(`other-${randomUUID()}`));
  await Promise.all([store.complete(other, response('other'), 3600), store.complete(running, response('done'), 3600)]);
  const woken = await Promise.race([
    wait.changed.then(() => 'woken'),
    delay(5_000, undefined, { ref: false }).then(() => 'not woken'),
  ]);
  wait.cancel();
  expect(woken).toBe('woken');
});

it.each(['complete', 'release'] as const)(
  'a record marked awaited after its %s batch began, while the batch waited for it, is still changed (again, alone) and its waiter woken',
  async (operation) => {
    const running = await claimed(scopeOf(`marked-${randomUUID()}`));
    const other = await claimed(scopeOf(`other-${randomUUID()}`));
    // A waiter's mark, not yet committed when the batch's statement begins: the batch waits for its row, then
    // finds a version of it that its statement cannot see.
    const mark = await holdLock(db.url, 'UPDATE idempotency_records SET awaited = true WHERE idempotency_key = $1', [
      running.scope.key,
    ]);
    const wait = store.waitForChange(running.scope, 60_000);
    await wait.listening;
    const change = (claim: { scope: IdempotencyScope; attempt: string }) =>
      operation === 'complete' ? store.complete(claim, response('done'), 3600) : store.release(claim);
    const { result, statements } = await counted(async () => {
      const changed = Promise.all([change(running), change(other)]);
      await waitFor(waitingForLock(db, '%locked AS%'), 'the batch to wait for the marked record');
      await mark.commit();
      return changed;
    }).finally(() => mark.letGo());
    const woken = await Promise.race([
      wait.changed.then(() => 'woken'),
      delay(5_000, undefined, { ref: false }).then(() => 'not woken'),
    ]);
    wait.cancel();

    expect(result).toEqual([true, true]);
    // The marked record's batch (alone: the first in flight), the marked record again alone, the other's batch.
    expect(statements).toBe(3);
    expect(woken).toBe('woken');
    const rows = await db.query<{ status: string }>(
      'SELECT status FROM idempotency_records WHERE idempotency_key = $1',
      [running.scope.key],
    );
    expect(rows.map(({ status }) => status)).toEqual(operation === 'complete' ? ['completed'] : []);
  },
);

it('a batch that meets a record locked by a long transaction answers its other claims at once, and the locked one once the lock goes', async () => {
  const locked = scopeOf(`locked-${randomUUID()}`);
  await store.claim(locked, 'fp', randomUUID(), { leaseSeconds: 0.001, ttlSeconds: 3600 });
  await db.query('SELECT pg_sleep(0.01)');
  const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [
    locked.key,
  ]);
  try {
    const others = [scopeOf(`free-${randomUUID()}`), scopeOf(`free-${randomUUID()}`)];
    const [, lockedClaim, ...otherClaims] = [
      store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING),
      store.claim(locked, 'fp', randomUUID(), TIMING),
      ...others.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)),
    ];
    // The claims that shared its statement do not wait with it; it is refused (a 503 its client retries).
    await expect(Promise.all(otherClaims)).resolves.toEqual([
      { claimed: true, takeover: false },
      { claimed: true, takeover: false },
    ]);
    await expect(lockedClaim).rejects.toMatchObject({ code: '55P03' });
    await lock.letGo();
    // Refused without a statement for a moment, then claimed as its lapsed lease allows.
    const retried = await waitFor(
      () => store.claim(locked, 'fp', randomUUID(), TIMING).catch(() => undefined),
      'the record to be claimed again once its lock went',
    );
    expect(retried).toEqual({ claimed: true, takeover: true });
  } finally {
    await lock.letGo();
  }
});

it.each([
  ['its lock bound', (test: (on: PostgresIdempotencyStore) => Promise<void>) => test(store)],
  ["an application's statement_timeout shorter than that bound", withShortStatementTimeout],
])(
  'a batch that met records held by a long transaction (past %s) claims its others at once, and refuses the held ones without waiting again',
  (_, withStore) =>
    withStore(async (on) => {
      // More held records than the batches have connections (2 here): sent one by one, each would wait its 500 ms,
      // and the free claims behind them.
      const held = Array.from({ length: 6 }, (_, n) => scopeOf(`held-${n}-${randomUUID()}`));
      for (const scope of held) await on.claim(scope, 'fp', randomUUID(), { leaseSeconds: 0.001, ttlSeconds: 3600 });
      await db.query('SELECT pg_sleep(0.01)');
      const lock = await holdLock(
        db.url,
        'SELECT 1 FROM idempotency_records WHERE idempotency_key = ANY($1) FOR UPDATE',
        [held.map(({ key }) => key)],
      );
      try {
        const outcome = (claiming: Promise<ClaimResult>) =>
          claiming.then(summary, (error: { code?: string }) => `refused ${error.code}`);
        const { result, statements } = await counted(
          () =>
            Promise.all([
              outcome(on.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING)), // goes out alone
              ...held.map((scope) => outcome(on.claim(scope, 'fp', randomUUID(), TIMING))),
              outcome(on.claim(scopeOf(`free-${randomUUID()}`), 'fp', randomUUID(), TIMING)),
              outcome(on.claim(scopeOf(`free-${randomUUID()}`), 'fp', randomUUID(), TIMING)),
            ]),
          on,
        );
        expect(result).toEqual(['claimed', ...held.map(() => 'refused 55P03'), 'claimed', 'claimed']);
        // The first alone, the batch that waited, the question of which records are held, the free ones again: no
        // statement of a held record alone.
        expect(statements).toBe(4);
        // Retried at once, a held record is refused without a statement, for a moment.
        const again = await counted(() => outcome(on.claim(held[0], 'fp', randomUUID(), TIMING)), on);
        expect(again).toEqual({ result: 'refused 55P03', statements: 0 });
      } finally {
        await lock.letGo();
      }
    }),
);

it("a claim of a record locked past the batches' bound fails alone after it, and leaves no statement waiting", async () => {
  const held = [1, 2, 3].map((n) => scopeOf(`held-${n}-${randomUUID()}`));
  for (const scope of held) await store.claim(scope, 'fp', randomUUID(), { leaseSeconds: 0.001, ttlSeconds: 3600 });
  await db.query('SELECT pg_sleep(0.01)');
  const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = ANY($1) FOR UPDATE', [
    held.map(({ key }) => key),
  ]);
  try {
    const claims = Promise.allSettled(held.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)));
    // Each waits 500 ms in its batch, then 500 ms alone: bounded, where a statement on the data source's pool would
    // wait for as long as the lock lasts, a connection of the application's held by each.
    const settled = await Promise.race([claims, delay(10_000).then(() => 'still waiting' as const)]);
    expect(settled).not.toBe('still waiting');
    expect((settled as PromiseSettledResult<ClaimResult>[]).map((result) => result.status)).toEqual([
      'rejected',
      'rejected',
      'rejected',
    ]);
    await expect(waitingForLock(db, '%')()).resolves.toBeUndefined();
    await expect(store.claim(scopeOf(`free-${randomUUID()}`), 'fp', randomUUID(), TIMING)).resolves.toEqual({
      claimed: true,
      takeover: false,
    });
  } finally {
    await lock.letGo();
  }
});

it('an outcome batch that met records held by a long transaction stores its others at once, and tries the held ones one after another', async () => {
  const heldClaims = await Promise.all(
    Array.from({ length: 4 }, (_, n) => claimed(scopeOf(`held-${n}-${randomUUID()}`))),
  );
  const freeClaims = await Promise.all([1, 2].map((n) => claimed(scopeOf(`free-${n}-${randomUUID()}`))));
  const next = await claimed(scopeOf(`next-${randomUUID()}`));
  const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = ANY($1) FOR UPDATE', [
    heldClaims.map(({ scope }) => scope.key),
  ]);
  try {
    const settled: string[] = [];
    const storeOutcome = (claim: { scope: IdempotencyScope; attempt: string }, name: string) =>
      store.complete(claim, response(name), 3600).then(
        (stored) => settled.push(`${name} ${stored ? 'stored' : 'fenced'}`),
        () => settled.push(`${name} refused`),
      );
    const outcomes = [
      storeOutcome(await claimed(scopeOf(`ahead-${randomUUID()}`)), 'ahead'), // goes out alone
      ...heldClaims.map((claim) => storeOutcome(claim, 'held')),
      ...freeClaims.map((claim) => storeOutcome(claim, 'free')),
    ];
    // The held ones go alone, one at a time: an outcome made meanwhile finds one of the batches' two connections free.
    await waitFor(waitingForLock(db, 'WITH changed AS (%'), 'a held record to be stored alone');
    outcomes.push(storeOutcome(next, 'next'));
    await Promise.all(outcomes);
    expect(settled).toEqual([
      'ahead stored',
      'free stored',
      'free stored',
      'next stored',
      ...heldClaims.map(() => 'held refused'),
    ]);
  } finally {
    await lock.letGo();
  }
});

it('a record the table refuses fails its own claim only, not the others of its statement', async () => {
  const [, refused, ...accepted] = await Promise.allSettled([
    store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING),
    // A TTL past the timestamps' range: PostgreSQL refuses the row.
    store.claim(scopeOf(`far-${randomUUID()}`), 'fp', randomUUID(), { leaseSeconds: 30, ttlSeconds: 1e13 }),
    store.claim(scopeOf(`near-${randomUUID()}`), 'fp', randomUUID(), TIMING),
    store.claim(scopeOf(`near-${randomUUID()}`), 'fp', randomUUID(), TIMING),
  ]);
  expect(refused.status).toBe('rejected');
  expect(accepted).toEqual([
    { status: 'fulfilled', value: { claimed: true, takeover: false } },
    { status: 'fulfilled', value: { claimed: true, takeover: false } },
  ]);
});

it('a claim batch and an outcome batch of the same records never deadlock: both take them in scope order', async () => {
  // Two lapsed claims, stored in the order B, A; their attempts' outcomes arrive as retries take them over.
  const [a, b] = [scopeOf(`a-${randomUUID()}`), scopeOf(`b-${randomUUID()}`)];
  const lapsing = { leaseSeconds: 0.001, ttlSeconds: 3600 };
  const [attemptA, attemptB] = [randomUUID(), randomUUID()];
  await store.claim(b, 'fp', attemptB, lapsing);
  await store.claim(a, 'fp', attemptA, lapsing);
  await db.query('SELECT pg_sleep(0.01)');
  const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [
    a.key,
  ]);
  const other = new PostgresIdempotencyStore(dataSource, 'idempotency_records', {
    batching: { maxBatchSize: 64, maxInFlight: 1 },
  });
  // Its batches' connection open beforehand: the whole scene must fit in a batch's lock_timeout (500 ms).
  await other.complete({ scope: scopeOf(`warm-${randomUUID()}`), attempt: randomUUID() }, response('none'), 3600);
  try {
    // The retries' claims in one statement, waiting on A; the outcomes in one statement of another connection. A
    // deadlock would fail one of the two, whose items would then go one by one: more statements than two each.
    const [claimsBefore, outcomesBefore] = [store.statementsSent, other.statementsSent];
    const claims = Promise.all([
      store.claim(scopeOf(`ahead-${randomUUID()}`), 'fp', randomUUID(), TIMING),
      store.claim(a, 'fp', randomUUID(), TIMING),
      store.claim(b, 'fp', randomUUID(), TIMING),
    ]);
    await waitFor(
      waitingForLock(db, '%$5::uuid[], $6::float8[]%') /* the claim batch's start */,
      'the claims to wait for A',
    );
    const outcomes = Promise.all([
      other.complete({ scope: scopeOf(`none-${randomUUID()}`), attempt: randomUUID() }, response('none'), 3600),
      other.complete({ scope: b, attempt: attemptB }, response('b'), 3600),
      other.complete({ scope: a, attempt: attemptA }, response('a'), 3600),
    ]);
    await waitFor(waitingForLock(db, '%l.response_status%'), 'the outcomes to wait for A');
    await lock.letGo();
    const [, claimA, claimB] = await claims;
    expect([claimA, claimB]).toEqual([
      { claimed: true, takeover: true },
      { claimed: true, takeover: true },
    ]);
    // Taken over first: the lapsed attempts' outcomes are fenced, and no statement failed.
    await expect(outcomes).resolves.toEqual([false, false, false]);
    expect([store.statementsSent - claimsBefore, other.statementsSent - outcomesBefore]).toEqual([2, 2]);
  } finally {
    await lock.letGo();
    await other.close();
  }
});

it("sets up each batch's session as the application sets up its data source's (a connect listener's search_path)", async () => {
  // The table the sessions' search_path finds is in schema tenant_a; public holds another, which no batch may reach.
  await db.query('CREATE SCHEMA tenant_a');
  await db.query('CREATE TABLE tenant_a.idempotency_records (LIKE public.idempotency_records INCLUDING ALL)');
  const scoped = new DataSource({ type: 'postgres', url: db.url });
  await scoped.initialize();
  (scoped.driver as PostgresDriver).master.on('connect', (client: PoolClient) => {
    client.query('SET search_path TO tenant_a').catch(() => undefined);
  });
  const inSchema = new PostgresIdempotencyStore(scoped, 'idempotency_records');
  try {
    const scope = scopeOf(`schema-${randomUUID()}`);
    const attempt = randomUUID();
    await expect(inSchema.claim(scope, 'fp', attempt, TIMING)).resolves.toEqual({ claimed: true, takeover: false });
    await expect(inSchema.complete({ scope, attempt }, response('stored'), 3600)).resolves.toBe(true);
    const statusIn = async (table: string) =>
      (await db.query<{ status: string }>(`SELECT status FROM ${table} WHERE idempotency_key = $1`, [scope.key])).map(
        ({ status }) => status,
      );
    expect([await statusIn('tenant_a.idempotency_records'), await statusIn('public.idempotency_records')]).toEqual([
      ['completed'],
      [],
    ]);
  } finally {
    await inSchema.close();
    await scoped.destroy();
  }
});

it("is unhealthy when the batches cannot open a connection, though the data source's pool still answers", async () => {
  const proxy = await TcpProxy.to(db.url);
  const proxied = new DataSource({ type: 'postgres', url: proxy.urlFor(db.url), extra: { max: 2 } });
  await proxied.initialize();
  const behind = new PostgresIdempotencyStore(proxied, 'idempotency_records');
  try {
    await expect(behind.checkHealth(2_000)).resolves.toBeDefined();
    // Each of the data source's connections is open and idle: only a new connection is refused.
    await Promise.all([proxied.query('SELECT 1'), proxied.query('SELECT 1')]);
    await behind.close(); // its batches' connections too: the next store opens its own
    const fresh = new PostgresIdempotencyStore(proxied, 'idempotency_records');
    proxy.refuseNewConnections();
    await expect(proxied.query('SELECT 1')).resolves.toBeDefined();
    await expect(fresh.checkHealth(2_000)).rejects.toThrow();
    await fresh.close();
  } finally {
    await proxied.destroy();
    await proxy.close();
  }
});

function summary(result: ClaimResult): string {
  if (result.claimed) return 'claimed';
  const { existing } = result;
  return existing.status === 'completed'
    ? `completed ${existing.fingerprint} ${existing.response.body.toString()}`
    : `in_progress ${existing.fingerprint}`;
}
