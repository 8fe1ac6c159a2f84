import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import type { ClaimResult, IdempotencyScope } from '../../src/store/index.js';
import { idempotencyMigrations, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

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

/** Runs `burst`, and says how many statements the store sent for it. */
async function counted<T>(burst: () => Promise<T>): Promise<{ result: T; statements: number }> {
  const before = store.statementsSent;
  const result = await burst();
  return { result, statements: store.statementsSent - before };
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

it('a statement that fails fails each claim of its batch, and claims none of them', async () => {
  const first = scopeOf(`alone-${randomUUID()}`);
  const batched = [scopeOf(`a-${randomUUID()}`), scopeOf(`b-${randomUUID()}`)];
  const results = await Promise.allSettled([
    store.claim(first, 'fp', randomUUID(), TIMING),
    ...batched.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)),
    // An attempt id the uuid column refuses: the whole statement fails.
    store.claim(scopeOf(`bad-${randomUUID()}`), 'fp', 'not-a-uuid', TIMING),
  ]);
  expect(results.map(({ status }) => status)).toEqual(['fulfilled', 'rejected', 'rejected', 'rejected']);
  const rows = await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = ANY($1)', [
    batched.map(({ key }) => key),
  ]);
  expect(rows).toHaveLength(0);
  // Claimed again, each is claimed once.
  const again = await Promise.all(batched.map((scope) => store.claim(scope, 'fp', randomUUID(), TIMING)));
  expect(again).toEqual([
    { claimed: true, takeover: false },
    { claimed: true, takeover: false },
  ]);
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
  const woken = await Promise.race([wait.changed.then(() => 'woken'), delay(5_000).then(() => 'not woken')]);
  wait.cancel();
  expect(woken).toBe('woken');
});

function summary(result: ClaimResult): string {
  if (result.claimed) return 'claimed';
  const { existing } = result;
  return existing.status === 'completed'
    ? `completed ${existing.fingerprint} ${existing.response.body.toString()}`
    : `in_progress ${existing.fingerprint}`;
}
