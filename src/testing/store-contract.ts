import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type {
  AbandonedQuery,
  ClaimResult,
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoredStep,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';

/** A store for one case of the contract, made fresh by the factory given to `describeIdempotencyStoreContract`. */
export interface StoreUnderTest {
  store: IdempotencyStore;
  /**
   * Moves the store's clock forward (a store on a fake clock, as `InMemoryIdempotencyStore` with `now`). Without it,
   * the cases that need time to pass use leases and TTLs of a few tenths of a second and wait for them in real time.
   */
  advanceTime?(seconds: number): void | Promise<void>;
  /** Called after the case, pass or fail: close the store, give its connections back. Default: `store.close?.()`. */
  cleanup?(): void | Promise<void>;
}

/**
 * The two functions of a test runner the kit defines its cases with. Jest, Vitest (with `globals: true`), Mocha and
 * Jasmine have them as globals, which is the default; with `node:test`, pass `{ describe, it }` from it.
 */
export interface ContractTestRunner {
  describe: (name: string, body: () => void) => unknown;
  it: (name: string, body: () => Promise<void>, timeoutMs?: number) => unknown;
}

export interface StoreContractOptions {
  /** Default: the global `describe` and `it`. */
  runner?: ContractTestRunner;
  /** Passed to `it` as its timeout (Jest's and Vitest's third argument). Default: none (the runner's own). */
  timeoutMs?: number;
  /**
   * Whether the store opens holder transactions (`beginHoldingTransaction`), which free a dead holder's key at once.
   * `false` for a store that never does (it resolves `undefined`, and its claims fall back to the lease): the kit
   * checks that it does not, in place of the holder cases. Default: `true`.
   */
  holderTransactions?: boolean;
  /**
   * Whether the store runs transactions (`beginTransaction`). `false` for a store that says why it does not
   * (`transactionsRefused`, as the Redis store): the kit checks that it refuses them, in place of the transaction
   * cases, and expects no holder transactions either. Default: `true`.
   */
  transactions?: boolean;
  /**
   * Whether the store deletes a record at its expiry on its own (Redis's key TTLs): `purgeExpired` then has nothing to
   * delete, and an in-progress record past its TTL is gone, so that claiming it again is a new claim, not a takeover.
   * Default: `false` (records past their expiry stay until the purge deletes them).
   */
  expiresOnItsOwn?: boolean;
  /**
   * Whether the store finds abandoned records for the completer (`findAbandoned`). `false` for a store that cannot (the
   * Redis store): the kit checks that it has no `findAbandoned`, in place of those cases. Default: `true`.
   */
  findsAbandoned?: boolean;
}

const LONG: ClaimTiming = { leaseSeconds: 60, ttlSeconds: 3600 };
/** A lease that lapses while a real-time case waits. */
const SHORT_LEASE: ClaimTiming = { leaseSeconds: 0.2, ttlSeconds: 3600 };
/** How long "waiting for a lease or TTL to run out" waits in real time, past the lease or TTL itself. */
const MARGIN_SECONDS = 0.05;
/** How long a case waits at most for a waiter to be woken. */
const WAKE_BOUND_MS = 5_000;
/** How long a case waits at most for the store to see that a holder transaction ended, far below `LONG`'s lease. */
const HOLDER_END_BOUND_MS = 5_000;

/** A holder transaction of `scope`, which a store that opens them gives on an idle store. */
async function openHolder(store: IdempotencyStore, scope: IdempotencyScope): Promise<StoreTransaction> {
  const holder = await store.beginHoldingTransaction(scope);
  assert.ok(holder, 'beginHoldingTransaction opened no transaction on an idle store');
  return holder;
}

const response: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json; charset=utf-8', 'set-cookie': ['a=1', 'b=2'], location: '/v1/x/1' },
  body: Buffer.from([0x7b, 0x00, 0xff, 0x7d]),
};

/**
 * Defines the cases every `IdempotencyStore` must pass, with the test runner's `describe` and `it`: the claim and its
 * four answers, fencing by attempt, leases, takeovers, expiry, the TTL counted from completion, transactions, waking
 * the waiters of an outcome, purges in batches, concurrent claims. `PostgresIdempotencyStore` and
 * `InMemoryIdempotencyStore` pass it; a store of your own should too:
 *
 * ```ts
 * import { describeIdempotencyStoreContract } from 'nest-idempotency/testing';
 *
 * describeIdempotencyStoreContract('RedisIdempotencyStore', async () => {
 *   const store = new RedisIdempotencyStore(redis);
 *   return { store, cleanup: () => store.close() };
 * });
 * ```
 *
 * `makeStore` runs once per case. Stores made by one factory may share their storage: every case uses scopes of its
 * own (the purge case counts only its own records). Assertions are `node:assert`'s, so any runner reports them.
 */
export function describeIdempotencyStoreContract(
  name: string,
  makeStore: () => Promise<StoreUnderTest>,
  options: StoreContractOptions = {},
): void {
  const runner = options.runner ?? globalRunner();
  const { describe } = runner;
  const it = (title: string, body: (subject: StoreUnderTest) => Promise<void>) =>
    runner.it(
      title,
      async () => {
        const subject = await makeStore();
        try {
          await body(subject);
        } finally {
          await (subject.cleanup ? subject.cleanup() : subject.store.close?.());
        }
      },
      ...(options.timeoutMs === undefined ? [] : [options.timeoutMs]),
    );

  describe(`${name} (idempotency store contract)`, () => {
    describe('claim', () => {
      it('claims a new scope', async ({ store }) => {
        assert.deepEqual(await store.claim(newScope(), 'fp', randomUUID(), LONG), { claimed: true, takeover: false });
      });

      it('answers a claim of a scope still in progress with the in-progress record and its fingerprint', async ({
        store,
      }) => {
        const scope = newScope();
        await claimed(store, scope, 'fp', LONG);
        assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
      });

      it('answers a different request with the fingerprint of the one holding the scope', async ({ store }) => {
        const scope = newScope();
        await claimed(store, scope, 'fp', LONG);
        assert.deepEqual(await store.claim(scope, 'another request', randomUUID(), LONG), inProgress('fp'));
      });

      it('keeps accounts, endpoints and keys apart: the same key in another scope is a new claim', async ({
        store,
      }) => {
        const scope = newScope();
        await claimed(store, scope, 'fp', LONG);
        for (const other of [
          { ...scope, account: `${scope.account}-other` },
          { ...scope, endpoint: `${scope.endpoint}/other` },
          { ...scope, key: `${scope.key}-other` },
        ]) {
          assert.deepEqual(await store.claim(other, 'fp', randomUUID(), LONG), { claimed: true, takeover: false });
        }
      });

      it('lets exactly one of many concurrent claims of one scope win', async ({ store }) => {
        const scope = newScope();
        const results = await Promise.all(
          Array.from({ length: 16 }, () => store.claim(scope, 'fp', randomUUID(), LONG)),
        );
        assert.deepEqual(
          results.filter((result) => result.claimed),
          [{ claimed: true, takeover: false }],
        );
        for (const result of results.filter((result) => !result.claimed)) assert.deepEqual(result, inProgress('fp'));
      });
    });

    describe('complete', () => {
      it('answers later claims with the completed record, byte for byte, and the time it has left', async ({
        store,
      }) => {
        const scope = newScope();
        const claim = await claimed(store, scope, 'fp', LONG);
        assert.equal(await store.complete(claim, response, 60), true);
        for (const fingerprint of ['fp', 'another request']) {
          const expiresIn = completedWith(await store.claim(scope, fingerprint, randomUUID(), LONG), 'fp', response);
          assert.ok(expiresIn > 50 && expiresIn <= 60, `expiresInSeconds ${expiresIn} is not within (50, 60]`);
        }
      });

      it('stores a copy of the response: changing it afterwards changes nothing stored', async ({ store }) => {
        const scope = newScope();
        const mine = { ...response, headers: { ...response.headers }, body: Buffer.from(response.body) };
        await store.complete(await claimed(store, scope, 'fp', LONG), mine, 60);
        mine.body.fill(0);
        mine.headers.location = '/elsewhere';
        const first = await store.claim(scope, 'fp', randomUUID(), LONG);
        completedWith(first, 'fp', response);
        if (first.claimed === false && first.existing.status === 'completed') first.existing.response.body.fill(0);
        completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
      });

      it('counts the TTL from the completion, not from the claim', async (subject) => {
        const scope = newScope();
        const claim = await claimed(subject.store, scope, 'fp', LONG);
        await elapse(subject, 0.6);
        assert.equal(await subject.store.complete(claim, response, 1.2), true);
        const expiresIn = completedWith(await subject.store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
        assert.ok(expiresIn > 0.9 && expiresIn <= 1.2, `expiresInSeconds ${expiresIn} is not within (0.9, 1.2]`);
      });

      it('lets any request claim the scope anew once the completed record has expired (not a takeover)', async (subject) => {
        const scope = newScope();
        await subject.store.complete(await claimed(subject.store, scope, 'fp', LONG), response, 0.2);
        await elapse(subject, 0.2);
        assert.deepEqual(await subject.store.claim(scope, 'another request', randomUUID(), LONG), {
          claimed: true,
          takeover: false,
        });
      });
    });

    describe('fencing by attempt', () => {
      it('lets only the holder renew, complete or release its claim', async ({ store }) => {
        const scope = newScope();
        const claim = await claimed(store, scope, 'fp', LONG);
        const stranger = { scope, attempt: randomUUID() };
        assert.equal(await store.renew(stranger, LONG), false);
        assert.equal(await store.complete(stranger, response, 60), false);
        assert.equal(await store.release(stranger), false);
        assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
        assert.equal(await store.renew(claim, LONG), true);
        assert.equal(await store.complete(claim, response, 60), true);
      });

      it('refuses to renew, complete again or release a completed claim', async ({ store }) => {
        const scope = newScope();
        const claim = await claimed(store, scope, 'fp', LONG);
        await store.complete(claim, response, 60);
        assert.equal(await store.renew(claim, LONG), false);
        assert.equal(await store.complete(claim, { ...response, status: 500 }, 60), false);
        assert.equal(await store.release(claim), false);
        completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
      });

      it('refuses to renew, complete or release a released claim', async ({ store }) => {
        const scope = newScope();
        const claim = await claimed(store, scope, 'fp', LONG);
        assert.equal(await store.release(claim), true);
        assert.equal(await store.renew(claim, LONG), false);
        assert.equal(await store.complete(claim, response, 60), false);
        assert.equal(await store.release(claim), false);
      });
    });

    describe('release', () => {
      it('deletes the record: the next claim wins, for any request, and is no takeover', async ({ store }) => {
        const scope = newScope();
        assert.equal(await store.release(await claimed(store, scope, 'fp', LONG)), true);
        assert.deepEqual(await store.claim(scope, 'another request', randomUUID(), LONG), {
          claimed: true,
          takeover: false,
        });
      });
    });

    describe('leases and takeovers', () => {
      it('extends the lease on renewal', async (subject) => {
        const scope = newScope();
        const claim = await claimed(subject.store, scope, 'fp', SHORT_LEASE);
        assert.equal(await subject.store.renew(claim, LONG), true);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        assert.deepEqual(await subject.store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
      });

      it('lets the same request take over a lapsed lease, and fences the attempt that lost it', async (subject) => {
        const { store } = subject;
        const scope = newScope();
        const lost = await claimed(store, scope, 'fp', SHORT_LEASE);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        const taker = { scope, attempt: randomUUID() };
        assert.deepEqual(await store.claim(scope, 'fp', taker.attempt, LONG), { claimed: true, takeover: true });
        assert.equal(await store.renew(lost, LONG), false);
        assert.equal(await store.complete(lost, response, 60), false);
        assert.equal(await store.release(lost), false);
        assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
        assert.equal(await store.complete(taker, response, 60), true);
      });

      it('lets a holder whose lease lapsed still renew it while nobody took it over', async (subject) => {
        const scope = newScope();
        const claim = await claimed(subject.store, scope, 'fp', SHORT_LEASE);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        assert.equal(await subject.store.renew(claim, LONG), true);
        assert.deepEqual(await subject.store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
      });

      it('does not let a different request take over a lapsed lease', async (subject) => {
        const scope = newScope();
        await claimed(subject.store, scope, 'fp', SHORT_LEASE);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        assert.deepEqual(await subject.store.claim(scope, 'another request', randomUUID(), LONG), inProgress('fp'));
      });

      it('lets exactly one of many concurrent takers win a lapsed lease', async (subject) => {
        const scope = newScope();
        await claimed(subject.store, scope, 'fp', SHORT_LEASE);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        const results = await Promise.all(
          Array.from({ length: 8 }, () => subject.store.claim(scope, 'fp', randomUUID(), LONG)),
        );
        assert.deepEqual(
          results.filter((result) => result.claimed),
          [{ claimed: true, takeover: true }],
        );
        for (const result of results.filter((result) => !result.claimed)) assert.deepEqual(result, inProgress('fp'));
      });

      it(`lets any request claim an in-progress record past its TTL, as ${
        options.expiresOnItsOwn ? 'a new claim (it expired)' : 'a takeover'
      }`, async (subject) => {
        const scope = newScope();
        await claimed(subject.store, scope, 'fp', { leaseSeconds: 0.1, ttlSeconds: 0.1 });
        await elapse(subject, 0.2);
        assert.deepEqual(await subject.store.claim(scope, 'another request', randomUUID(), LONG), {
          claimed: true,
          takeover: !options.expiresOnItsOwn,
        });
      });
    });

    describe('steps (recovery points)', () => {
      const charge: StoredStep = { name: 'charge-card', result: '{"charge":"ch_1"}' };
      const receipt: StoredStep = { name: 'send-receipt', result: 'null' };

      it('gives the steps of an attempt to the same request taking it over, in the order they were recorded', async (subject) => {
        const { store } = subject;
        const scope = newScope();
        const first = await claimed(store, scope, 'fp', SHORT_LEASE);
        assert.equal(await recordStep(store, first, charge), true);
        assert.equal(await recordStep(store, first, receipt), true);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        const taker = { scope, attempt: randomUUID() };
        assert.deepEqual(await store.claim(scope, 'fp', taker.attempt, LONG), {
          claimed: true,
          takeover: true,
          steps: [charge, receipt],
        });
        assert.equal(
          await recordStep(store, first, { name: 'late', result: '1' }),
          false,
          'a fenced attempt recorded a step',
        );
        const third: StoredStep = { name: 'third', result: '[1,2]' };
        assert.equal(await recordStep(store, taker, third), true);
        await store.release(taker);
        assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), {
          claimed: true,
          takeover: true,
          steps: [charge, receipt, third],
        });
      });

      it('keeps a released record with steps for the same request, at once, and refuses another request', async ({
        store,
      }) => {
        const scope = newScope();
        const first = await claimed(store, scope, 'fp', LONG);
        await recordStep(store, first, charge);
        assert.equal(await store.release(first), true);
        assert.equal(await store.release(first), false, 'a released claim was released again');
        assert.equal(await recordStep(store, first, receipt), false, 'a released claim recorded a step');
        assert.deepEqual(await store.claim(scope, 'another request', randomUUID(), LONG), inProgress('fp'));
        assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), {
          claimed: true,
          takeover: true,
          steps: [charge],
        });
      });

      it('wakes the waiters of a scope whose claim is released with steps', async ({ store }) => {
        const scope = newScope();
        const first = await claimed(store, scope, 'fp', LONG);
        await recordStep(store, first, charge);
        const wait = store.waitForChange(scope, 30_000);
        await wait.listening;
        assert.equal(await store.markAwaited(scope), true);
        assert.equal(await store.release(first), true);
        await woken(wait.changed, 'the waiter of a release with steps');
        assert.equal(await store.markAwaited(scope), false, 'a released record is still awaited as if leased');
      });

      it('records steps only for the attempt holding the claim: not a stranger, not a completed claim', async ({
        store,
      }) => {
        const scope = newScope();
        const claim = await claimed(store, scope, 'fp', LONG);
        assert.equal(await recordStep(store, { scope, attempt: randomUUID() }, charge), false);
        assert.equal(await store.complete(claim, response, 60), true);
        assert.equal(await recordStep(store, claim, receipt), false);
        completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
      });

      it('starts an expired record with steps anew: its steps are gone', async (subject) => {
        const scope = newScope();
        const first = await claimed(subject.store, scope, 'fp', { leaseSeconds: 0.1, ttlSeconds: 0.1 });
        await recordStep(subject.store, first, charge);
        await elapse(subject, 0.2);
        assert.deepEqual(await subject.store.claim(scope, 'fp', randomUUID(), LONG), {
          claimed: true,
          takeover: !options.expiresOnItsOwn,
        });
      });

      it('starts a completed record past its expiry anew: the steps of the operation before are gone', async (subject) => {
        const scope = newScope();
        const first = await claimed(subject.store, scope, 'fp', LONG);
        await recordStep(subject.store, first, charge);
        await subject.store.complete(first, response, 0.1);
        await elapse(subject, 0.1);
        assert.deepEqual(await subject.store.claim(scope, 'fp', randomUUID(), LONG), {
          claimed: true,
          takeover: false,
        });
      });

      it('keeps results as they were given, whatever their characters', async ({ store }) => {
        const scope = newScope();
        const first = await claimed(store, scope, 'fp', LONG);
        const odd: StoredStep = {
          name: 'ünï "cödé" \\ step',
          result: JSON.stringify({ text: 'é\u2028\n"\\', n: 1e21 }),
        };
        await recordStep(store, first, odd);
        await store.release(first);
        const again = await store.claim(scope, 'fp', randomUUID(), LONG);
        assert.deepEqual(again, { claimed: true, takeover: true, steps: [odd] });
      });
    });

    if (options.findsAbandoned === false) {
      it('has no findAbandoned (the completer refuses it)', ({ store }) =>
        Promise.resolve(assert.equal(typeof store.findAbandoned, 'undefined')));
    } else {
      describe('abandoned records (the completer)', () => {
        const charge: StoredStep = { name: 'charge-card', result: '{"charge":"ch_1"}' };
        /** Every record of one case under an endpoint of its own, so that nothing else is found. */
        const endpointScope = (endpoint: string, key: string): IdempotencyScope => ({ account: 'acct', endpoint, key });
        const look = (store: IdempotencyStore, query: Partial<AbandonedQuery> & Pick<AbandonedQuery, 'endpoints'>) => {
          assert.ok(typeof store.findAbandoned === 'function', 'the store finds no abandoned records (findAbandoned)');
          return store.findAbandoned({ backoffSeconds: 0.001, maxBackoffSeconds: 0.001, limit: 10, ...query });
        };

        it('finds those in progress whose lease ended, idle longest first, with their fingerprint, attempts and steps', async (subject) => {
          const { store } = subject;
          const endpoint = `POST /v1/abandoned/${randomUUID()}`;
          const stepped = await claimed(store, endpointScope(endpoint, 'stepped'), 'fp-1', SHORT_LEASE);
          await recordStep(store, stepped, charge);
          await claimed(store, endpointScope(endpoint, 'crashed'), 'fp-2', SHORT_LEASE);
          await claimed(store, endpointScope(endpoint, 'running'), 'fp-3', LONG);
          const done = await claimed(store, endpointScope(endpoint, 'done'), 'fp-4', SHORT_LEASE);
          await store.complete(done, response, 3600);
          await claimed(store, endpointScope(`${endpoint}/other`, 'elsewhere'), 'fp-5', SHORT_LEASE);
          await elapse(subject, SHORT_LEASE.leaseSeconds);

          assert.deepEqual(await look(store, { endpoints: [endpoint] }), [
            { scope: endpointScope(endpoint, 'stepped'), fingerprint: 'fp-1', attempts: 1, steps: ['charge-card'] },
            { scope: endpointScope(endpoint, 'crashed'), fingerprint: 'fp-2', attempts: 1, steps: [] },
          ]);
          assert.deepEqual(
            (await look(store, { endpoints: [endpoint], limit: 1 })).map(({ scope }) => scope.key),
            ['stepped'],
          );
          // Not yet idle for the backoff (an hour for a first attempt).
          assert.deepEqual(
            await look(store, { endpoints: [endpoint], backoffSeconds: 3600, maxBackoffSeconds: 3600 }),
            [],
          );
        });

        it('selects by attempts: fewer than maxAttempts, at least minAttempts', async (subject) => {
          const { store } = subject;
          const endpoint = `POST /v1/abandoned/${randomUUID()}`;
          const scope = endpointScope(endpoint, 'retried');
          await claimed(store, scope, 'fp', SHORT_LEASE);
          await elapse(subject, SHORT_LEASE.leaseSeconds);
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), SHORT_LEASE), {
            claimed: true,
            takeover: true,
          });
          await elapse(subject, SHORT_LEASE.leaseSeconds);
          const keys = async (query: Partial<AbandonedQuery>) =>
            (await look(store, { endpoints: [endpoint], ...query })).map((found) => found.attempts);
          assert.deepEqual(await keys({}), [2]);
          assert.deepEqual(await keys({ maxAttempts: 2 }), []);
          assert.deepEqual(await keys({ maxAttempts: 3, minAttempts: 2 }), [2]);
          assert.deepEqual(await keys({ minAttempts: 3 }), []);
        });

        it('finds a record released with steps at once, and neither one released without steps nor an expired one', async (subject) => {
          const { store } = subject;
          const endpoint = `POST /v1/abandoned/${randomUUID()}`;
          const kept = await claimed(store, endpointScope(endpoint, 'kept'), 'fp', LONG);
          await recordStep(store, kept, charge);
          await store.release(kept);
          await store.release(await claimed(store, endpointScope(endpoint, 'released'), 'fp', LONG));
          await claimed(store, endpointScope(endpoint, 'expired'), 'fp', { leaseSeconds: 0.1, ttlSeconds: 0.1 });
          await elapse(subject, 0.2);
          assert.deepEqual(
            (await look(store, { endpoints: [endpoint] })).map(({ scope }) => scope.key),
            ['kept'],
          );
        });
      });
    }

    const transactions = options.transactions !== false;
    const holderTransactions = transactions && options.holderTransactions !== false;
    if (!transactions) {
      it('refuses transactions, saying why (`transactionsRefused`)', async ({ store }) => {
        assert.ok(store.transactionsRefused, 'a store without transactions says why in transactionsRefused');
        await assert.rejects(store.beginTransaction(5_000));
      });
    }

    if (transactions)
      describe('transactions', () => {
        it('stores an outcome completed in a transaction when it commits, not before', async ({ store }) => {
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const transaction = await store.beginTransaction(5_000);
          assert.equal(transaction.connectionLost, false);
          assert.equal(await store.complete(claim, response, 60, transaction), true);
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
          await transaction.commit();
          completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
        });

        // A transaction's own clock stops at its start (PostgreSQL's now()): a TTL counted from there would be shortened
        // by the run, and over before the outcome is stored for a run as long as the TTL.
        it("counts the TTL of an outcome completed in a transaction from the completion, not from the transaction's start", async (subject) => {
          const { store } = subject;
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const transaction = await store.beginTransaction(5_000);
          try {
            await elapse(subject, 0.6);
            assert.equal(await store.complete(claim, response, 1.2, transaction), true);
            await transaction.commit();
          } finally {
            await transaction.rollback();
          }
          // Counted from the transaction's start, it would be 0.55 s at most; the margin is for a slow commit and claim.
          const expiresIn = completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
          assert.ok(expiresIn > 0.8 && expiresIn <= 1.2, `expiresInSeconds ${expiresIn} is not within (0.8, 1.2]`);
        });

        it('discards it when the transaction rolls back: the claim is still held by its attempt', async ({ store }) => {
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const transaction = await store.beginTransaction(5_000);
          assert.equal(await store.complete(claim, response, 60, transaction), true);
          await transaction.rollback();
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
          assert.equal(await store.complete(claim, response, 60), true);
          completedWith(await store.claim(scope, 'fp', randomUUID(), LONG), 'fp', response);
        });

        it('discards it when the transaction is abandoned', async ({ store }) => {
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const transaction = await store.beginTransaction(5_000);
          assert.equal(await store.complete(claim, response, 60, transaction), true);
          transaction.abandon();
          await transaction.rollback().catch(() => undefined); // gives back what the transaction held
          assert.equal(await store.release(claim), true);
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), { claimed: true, takeover: false });
        });

        for (const ending of ['commit', 'rollback'] as const) {
          it(`makes a takeover racing a completion in a transaction wait for its ${ending}`, async (subject) => {
            const { store } = subject;
            const scope = newScope();
            const claim = await claimed(store, scope, 'fp', SHORT_LEASE);
            const transaction = await store.beginTransaction(5_000);
            try {
              assert.equal(await store.complete(claim, response, 60, transaction), true);
              await elapse(subject, SHORT_LEASE.leaseSeconds);
              // The lease lapsed, but the record is being completed: the taker must not win it from under the commit.
              const taking = store.claim(scope, 'fp', randomUUID(), LONG);
              await transaction[ending]();
              if (ending === 'commit') completedWith(await taking, 'fp', response);
              else assert.deepEqual(await taking, { claimed: true, takeover: true });
            } finally {
              await transaction.rollback();
            }
          });
        }

        it('fences a completion in a transaction as any other', async ({ store }) => {
          const scope = newScope();
          await claimed(store, scope, 'fp', LONG);
          const transaction = await store.beginTransaction(5_000);
          try {
            assert.equal(await store.complete({ scope, attempt: randomUUID() }, response, 60, transaction), false);
          } finally {
            await transaction.rollback();
          }
        });

        for (const ending of ['commit', 'rollback'] as const) {
          it(`keeps a step recorded in a transaction only if it commits (${ending})`, async ({ store }) => {
            const scope = newScope();
            const claim = await claimed(store, scope, 'fp', LONG);
            const step: StoredStep = { name: 'write-rows', result: '{"rows":2}' };
            const transaction = await store.beginTransaction(5_000);
            try {
              assert.equal(await store.recordStep?.(claim, step, transaction), true);
              assert.equal(await store.recordStep?.({ scope, attempt: randomUUID() }, step, transaction), false);
            } finally {
              await transaction[ending]();
            }
            await store.release(claim);
            const again = await store.claim(scope, 'fp', randomUUID(), LONG);
            if (ending === 'commit') assert.deepEqual(again, { claimed: true, takeover: true, steps: [step] });
            else assert.deepEqual(again, { claimed: true, takeover: false }, 'a step rolled back was kept');
          });
        }
      });

    if (!holderTransactions) {
      it('opens no holder transaction: its claims fall back to the lease', async ({ store }) => {
        assert.equal(await store.beginHoldingTransaction(newScope()), undefined);
      });
    }

    if (holderTransactions)
      describe('holder transactions', () => {
        // A transactional attempt opens its transaction before its claim, holding the scope: when that transaction ends
        // with the claim still in progress (its process died, its connection was cut), nothing of its work can commit,
        // and the retry need not wait out the lease.
        for (const ending of ['commit', 'rollback', 'abandon'] as const) {
          for (const taker of ['holding its own', 'without one'] as const) {
            it(`lets the same request take over at once a claim whose holder transaction ended (${ending}), taker ${taker}`, async ({
              store,
            }) => {
              const scope = newScope();
              const holder = await openHolder(store, scope);
              const lost = { scope, attempt: randomUUID() };
              assert.deepEqual(await store.claim(scope, 'fp', lost.attempt, LONG, holder), {
                claimed: true,
                takeover: false,
              });
              if (ending === 'abandon') {
                holder.abandon();
                await holder.rollback().catch(() => undefined);
              } else await holder[ending]();
              assert.deepEqual(await store.claim(scope, 'another request', randomUUID(), LONG), inProgress('fp'));
              const taken = { scope, attempt: randomUUID() };
              // An abandoned transaction's end may take the store a moment to see (a database notices the cut connection).
              const result = await within(HOLDER_END_BOUND_MS, async () => {
                const transaction =
                  taker === 'holding its own' ? await store.beginHoldingTransaction(scope) : undefined;
                const claim = await store.claim(scope, 'fp', taken.attempt, LONG, transaction);
                await transaction?.rollback();
                return claim.claimed ? claim : undefined;
              });
              assert.deepEqual(result, { claimed: true, takeover: true });
              assert.equal(await store.release(lost), false);
              assert.equal(await store.complete(taken, response, 60), true);
            });
          }
        }

        // A claim can reach the store after its request was refused (it waited past its timeout for a connection) and
        // its holder rolled back: by then a retry's transaction may hold the scope, and its claim is live.
        it("never lets a claim whose holder transaction has ended take over the live claim of the scope's holder now", async ({
          store,
        }) => {
          const scope = newScope();
          const ended = await openHolder(store, scope);
          await ended.rollback();
          const current = await openHolder(store, scope);
          try {
            const live = { scope, attempt: randomUUID() };
            assert.deepEqual(await store.claim(scope, 'fp', live.attempt, LONG, current), {
              claimed: true,
              takeover: false,
            });
            assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG, ended), inProgress('fp'));
            assert.equal(await store.complete(live, response, 60, current), true);
            await current.commit();
          } finally {
            await current.rollback();
          }
        });

        it('keeps a claim whose holder transaction is open until its lease lapses, as a claim made without one', async ({
          store,
        }) => {
          const held = newScope();
          const holder = await openHolder(store, held);
          try {
            await store.claim(held, 'fp', randomUUID(), LONG, holder);
            const unheld = newScope();
            await claimed(store, unheld, 'fp', LONG);
            for (const scope of [held, unheld]) {
              assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
              // A second transaction does not hold a scope another open one holds, and frees nothing.
              const second = await store.beginHoldingTransaction(scope);
              try {
                assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG, second), inProgress('fp'));
              } finally {
                await second?.rollback();
              }
            }
          } finally {
            await holder.rollback();
          }
        });

        it('does not free a claim made with a transaction that could not hold its scope when that transaction ends', async ({
          store,
        }) => {
          const scope = newScope();
          const first = await openHolder(store, scope);
          // The second opens (an idle store has slots) without holding the scope, which the first holds.
          const second = await openHolder(store, scope);
          try {
            assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG, second), {
              claimed: true,
              takeover: false,
            });
            assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG, first), inProgress('fp'));
          } finally {
            await first.rollback();
            await second.rollback();
          }
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), inProgress('fp'));
        });
      });

    describe('waiting for an outcome', () => {
      for (const end of ['completed', 'released'] as const) {
        it(`wakes the waiters of an awaited scope when its claim is ${end}, and not those of others`, async ({
          store,
        }) => {
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const waiting = store.waitForChange(scope, 30_000);
          const other = store.waitForChange(newScope(), 30_000);
          try {
            await waiting.listening;
            assert.equal(await store.markAwaited(scope), true);
            assert.equal(
              await (end === 'completed' ? store.complete(claim, response, 60) : store.release(claim)),
              true,
            );
            await woken(waiting.changed, `the waiter of a ${end} claim`);
            assert.equal(await settledWithin(other.changed, 100), false, 'the waiter of another scope was woken');
          } finally {
            waiting.cancel();
            other.cancel();
          }
        });
      }

      if (transactions)
        it('wakes the waiters of an outcome completed in a transaction when it commits', async ({ store }) => {
          const scope = newScope();
          const claim = await claimed(store, scope, 'fp', LONG);
          const waiting = store.waitForChange(scope, 30_000);
          try {
            await waiting.listening;
            assert.equal(await store.markAwaited(scope), true);
            const transaction = await store.beginTransaction(5_000);
            assert.equal(await store.complete(claim, response, 60, transaction), true);
            assert.equal(await settledWithin(waiting.changed, 100), false, 'woken before the commit');
            await transaction.commit();
            await woken(waiting.changed, 'the waiter of a committed outcome');
          } finally {
            waiting.cancel();
          }
        });

      it('keeps a scope awaited across a takeover: the outcome of the attempt that took it over wakes the waiters', async (subject) => {
        const { store } = subject;
        const scope = newScope();
        const waiting = store.waitForChange(scope, 30_000);
        try {
          await waiting.listening; // first: the lease is short
          await claimed(store, scope, 'fp', { leaseSeconds: 0.3, ttlSeconds: 3600 });
          assert.equal(await store.markAwaited(scope), true);
          await elapse(subject, 0.3);
          const taker = { scope, attempt: randomUUID() };
          assert.deepEqual(await store.claim(scope, 'fp', taker.attempt, LONG), { claimed: true, takeover: true });
          assert.equal(await store.complete(taker, response, 60), true);
          await woken(waiting.changed, 'the waiter of a scope taken over');
        } finally {
          waiting.cancel();
        }
      });

      it('refuses to await a scope that is unknown, completed, or whose lease lapsed (the waiter claims again)', async (subject) => {
        const { store } = subject;
        assert.equal(await store.markAwaited(newScope()), false);
        const completed = newScope();
        await store.complete(await claimed(store, completed, 'fp', LONG), response, 60);
        assert.equal(await store.markAwaited(completed), false);
        const lapsed = newScope();
        await claimed(store, lapsed, 'fp', SHORT_LEASE);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        assert.equal(await store.markAwaited(lapsed), false);
      });

      it('ends a wait at its timeout, or when cancelled, when nothing changes', async ({ store }) => {
        await woken(store.waitForChange(newScope(), 50).changed, 'a wait of 50 ms');
        const waiting = store.waitForChange(newScope(), 30_000);
        await waiting.listening;
        waiting.cancel();
        await woken(waiting.changed, 'a cancelled wait');
      });
    });

    describe('purgeExpired', () => {
      const purging = options.expiresOnItsOwn
        ? 'finds them gone already'
        : 'deletes them in batches of at most batchSize';
      it(`loses expired records (the purge ${purging}), and keeps live ones`, async (subject) => {
        const { store } = subject;
        const expired = Array.from({ length: 5 }, () => newScope());
        // In progress and past their TTL: a claim after the purge tells a deleted one (no takeover) from one left.
        for (const scope of expired) await claimed(store, scope, 'fp', { leaseSeconds: 0.1, ttlSeconds: 0.1 });
        const live = newScope();
        await claimed(store, live, 'fp', LONG);
        await elapse(subject, 0.2);
        const batches = await purgedBatches(store, 2);
        const total = batches.reduce((sum, purged) => sum + purged, 0);
        if (options.expiresOnItsOwn) assert.equal(total, 0, 'a store whose records expire on their own purged some');
        else assert.ok(total >= expired.length, `purged ${total} records in batches ${batches.join(', ')}`);
        for (const scope of expired) {
          assert.deepEqual(await store.claim(scope, 'fp', randomUUID(), LONG), { claimed: true, takeover: false });
        }
        assert.deepEqual(await store.claim(live, 'fp', randomUUID(), LONG), inProgress('fp'));
      });

      // A claim abandoned by a crash keeps refusing other requests until its expiry, a TTL after its lease: deleted
      // when its lease lapsed, it would let a request with another body run under its key.
      it('deletes nothing before its expiry: a claim whose lease lapsed stays, and still refuses another request', async (subject) => {
        const { store } = subject;
        const lapsed = newScope();
        await claimed(store, lapsed, 'fp', SHORT_LEASE);
        const completed = newScope();
        await store.complete(await claimed(store, completed, 'fp', LONG), response, 60);
        await elapse(subject, SHORT_LEASE.leaseSeconds);
        await purgedBatches(store, 1000);
        assert.deepEqual(await store.claim(lapsed, 'another request', randomUUID(), LONG), inProgress('fp'));
        assert.deepEqual(await store.claim(lapsed, 'fp', randomUUID(), LONG), { claimed: true, takeover: true });
        completedWith(await store.claim(completed, 'fp', randomUUID(), LONG), 'fp', response);
      });
    });
  });
}

/** Purges batch after batch until one comes back short of `batchSize`; returns how many each deleted. */
async function purgedBatches(store: IdempotencyStore, batchSize: number): Promise<number[]> {
  const batches: number[] = [];
  for (;;) {
    const purged = await store.purgeExpired(batchSize);
    batches.push(purged);
    assert.ok(purged <= batchSize, `purgeExpired(${batchSize}) deleted ${purged} records`);
    if (purged < batchSize) return batches;
    assert.ok(batches.length < 10_000, `purgeExpired(${batchSize}) never ran out of records`);
  }
}

function globalRunner(): ContractTestRunner {
  const { describe, it } = globalThis as unknown as Partial<ContractTestRunner>;
  if (typeof describe !== 'function' || typeof it !== 'function') {
    throw new Error(
      'describeIdempotencyStoreContract found no global describe() and it(): run it under Jest (or Vitest with ' +
        "globals: true), or pass { runner: { describe, it } } (from 'node:test', say)",
    );
  }
  return { describe, it };
}

let scopes = 0;

/** A scope no other case (nor another run on a shared store) uses. */
function newScope(): IdempotencyScope {
  scopes += 1;
  return { account: `acct_${randomUUID()}`, endpoint: 'POST /v1/contract', key: `key-${scopes}` };
}

async function claimed(
  store: IdempotencyStore,
  scope: IdempotencyScope,
  fingerprint: string,
  timing: ClaimTiming,
): Promise<IdempotencyClaim> {
  const attempt = randomUUID();
  assert.deepEqual(await store.claim(scope, fingerprint, attempt, timing), { claimed: true, takeover: false });
  return { scope, attempt };
}

/** Records `step` through a store that must record steps. */
function recordStep(store: IdempotencyStore, claim: IdempotencyClaim, step: StoredStep): Promise<boolean> {
  assert.ok(typeof store.recordStep === 'function', 'the store records no steps (recordStep)');
  return store.recordStep(claim, step);
}

function inProgress(fingerprint: string): ClaimResult {
  return { claimed: false, existing: { status: 'in_progress', fingerprint } };
}

/** Asserts a claim answered with the completed record; returns its `expiresInSeconds`. */
function completedWith(result: ClaimResult, fingerprint: string, expected: StoredResponse): number {
  assert.equal(result.claimed, false, 'the claim won a scope that is completed');
  const existing = result.claimed === false ? result.existing : undefined;
  assert.equal(existing?.status, 'completed');
  if (existing?.status !== 'completed') return NaN;
  const { expiresInSeconds, ...rest } = existing;
  assert.deepEqual(rest, { status: 'completed', fingerprint, response: expected });
  assert.equal(typeof expiresInSeconds, 'number');
  return expiresInSeconds;
}

/** Lets `seconds` pass on the store's clock: advanced when it can be, waited for in real time otherwise. */
async function elapse(subject: StoreUnderTest, seconds: number): Promise<void> {
  if (subject.advanceTime) await subject.advanceTime(seconds + MARGIN_SECONDS);
  else await delay((seconds + MARGIN_SECONDS) * 1000);
}

async function woken(changed: Promise<void>, what: string): Promise<void> {
  assert.ok(await settledWithin(changed, WAKE_BOUND_MS), `${what} was not woken within ${WAKE_BOUND_MS} ms`);
}

/** `attempt`'s first value other than `undefined`, tried again every 20 ms for at most `ms`; `undefined` past it. */
async function within<T>(ms: number, attempt: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await attempt();
    if (value !== undefined || Date.now() >= deadline) return value;
    await delay(20);
  }
}

/** Whether `promise` settles within `ms`. */
async function settledWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const timeout = new AbortController();
  const settled = await Promise.race([
    promise.then(
      () => true,
      () => true,
    ),
    delay(ms, false, { signal: timeout.signal }).catch(() => false),
  ]);
  timeout.abort();
  return settled;
}
