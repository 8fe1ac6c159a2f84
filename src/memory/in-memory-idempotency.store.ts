import { randomUUID } from 'node:crypto';
import type {
  AbandonedQuery,
  AbandonedRecord,
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoredStep,
  StoreHealth,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';

export interface InMemoryIdempotencyStoreOptions {
  /**
   * The store's clock, in milliseconds since the epoch: every lease, expiry and `expiresInSeconds` is reckoned on
   * it. Default: `Date.now`. A test advances time by returning more. (Timeouts of `waitForChange` are real timers.)
   */
  now?: () => number;
}

/** One record, as the PostgreSQL store keeps one row; times in milliseconds on the store's clock. */
interface MemoryRecord {
  fingerprint: string;
  status: 'in_progress' | 'completed';
  /** Once released with steps, a token of the release's own, which no attempt has. */
  attempt: string;
  /** Attempts at the current in-progress record (a takeover counts one more); 1 after a fresh claim. */
  attempts: number;
  /** End of the lease; `null` once completed. */
  lockedUntil: number | null;
  expiresAt: number;
  response?: StoredResponse;
  /** The steps its attempts recorded, in order. */
  steps: StoredStep[];
  /** A waiter asked to be woken when this in-progress record is completed or released. */
  awaited: boolean;
  /** Claimed for a transaction that held the scope (as PostgreSQL's `lock_held`): free once it no longer does. */
  lockHeld: boolean;
}

/** The lock a transaction holds on a record it changed, until it commits (the change shows) or rolls back. */
interface RowLock {
  owner: InMemoryStoreTransaction;
  /** Resolves once the owner commits or rolls back. */
  released: Promise<void>;
  release(): void;
}

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;

/**
 * The record store in memory, for tests of an application that uses the module: the same results as
 * `PostgresIdempotencyStore` for every method (the claim and its takeover rules, fencing by attempt, leases and
 * expiry, the TTL counted from completion, release, waking the waiters of an outcome, purges in batches), on a
 * clock the test may drive (`now`). Nothing is shared between processes, and nothing survives a restart.
 *
 * Its transactions hold only the outcomes and steps stored in them (`complete`, `recordStep`): visible once they
 * commit, discarded when they roll back. They have no database connection, so a handler's own writes are not part of
 * them. As in PostgreSQL, a record completed (or given a step) inside a transaction is locked until it ends: a renewal,
 * release, completion or takeover of that record waits for it (a claim that finds the record held does not). A
 * transaction begun holding a scope holds it until it ends, as the PostgreSQL store's advisory lock.
 */
export class InMemoryIdempotencyStore implements IdempotencyStore {
  readonly processLocal = true;
  private readonly now: () => number;
  private readonly records = new Map<string, MemoryRecord>();
  private readonly locks = new Map<string, RowLock>();
  private readonly waiters = new Map<string, Set<() => void>>();
  /** The open transaction holding each scope held (`beginHoldingTransaction`). */
  private readonly scopeHolders = new Map<string, InMemoryStoreTransaction>();

  constructor(options: InMemoryIdempotencyStoreOptions = {}) {
    this.now = options.now ?? Date.now;
  }

  async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
    holder?: StoreTransaction,
  ): Promise<ClaimResult> {
    checkAttempt(attempt);
    const key = keyOf(scope);
    if (holder !== undefined) this.ownTransaction(holder, 'claim');
    for (;;) {
      const now = this.now();
      const holdsScope = holder !== undefined && this.scopeHolders.get(key) === holder;
      const current = this.records.get(key);
      // The record holds the scope unless it expired, or it is free and this is the same request: its lease lapsed,
      // or it was claimed for a transaction holding the scope and that transaction has ended.
      const holderGone = current?.lockHeld === true && (holdsScope || !this.scopeHolders.has(key));
      const holds =
        current !== undefined &&
        current.expiresAt > now &&
        !(
          current.status === 'in_progress' &&
          current.fingerprint === fingerprint &&
          ((current.lockedUntil as number) <= now || holderGone)
        );
      if (current && holds) return { claimed: false, existing: existingRecord(current, now) };
      const lock = this.locks.get(key);
      if (lock) {
        await lock.released; // a transaction is writing the record: decide again on what it leaves
        continue;
      }
      const takeover = current?.status === 'in_progress';
      // An expired record's steps went with it.
      const steps = takeover && current.expiresAt > now ? current.steps : [];
      this.records.set(key, {
        fingerprint,
        status: 'in_progress',
        attempt,
        attempts: takeover ? current.attempts + 1 : 1,
        lockedUntil: now + timing.leaseSeconds * 1000,
        expiresAt: now + (timing.leaseSeconds + timing.ttlSeconds) * 1000,
        steps,
        awaited: takeover ? current.awaited : false,
        lockHeld: holdsScope,
      });
      return steps.length > 0 ? { claimed: true, takeover, steps: copySteps(steps) } : { claimed: true, takeover };
    }
  }

  async renew({ scope, attempt }: IdempotencyClaim, timing: ClaimTiming): Promise<boolean> {
    checkAttempt(attempt);
    const record = await this.lockedRecord(scope, (record) => isHeldBy(record, attempt));
    if (!record) return false;
    const now = this.now();
    record.lockedUntil = now + timing.leaseSeconds * 1000;
    record.expiresAt = now + (timing.leaseSeconds + timing.ttlSeconds) * 1000;
    return true;
  }

  async complete(
    { scope, attempt }: IdempotencyClaim,
    response: StoredResponse,
    ttlSeconds: number,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    checkAttempt(attempt);
    const completed = (record: MemoryRecord): MemoryRecord => {
      const at = this.now(); // the clock at completion: the TTL counts from here
      return {
        ...record,
        status: 'completed',
        response: copyResponse(response),
        lockedUntil: null,
        expiresAt: at + ttlSeconds * 1000,
        // No attempt reads a completed record's steps: their results are dropped, as the other stores drop them.
        steps: record.steps.map(({ name }) => ({ name, result: '' })),
      };
    };
    if (transaction === undefined) {
      const record = await this.lockedRecord(scope, (record) => isHeldBy(record, attempt));
      if (!record) return false;
      const done = completed(record);
      const key = keyOf(scope);
      this.records.set(key, done);
      if (done.awaited) this.wake(key);
      return true;
    }
    this.ownTransaction(transaction, 'complete');
    return this.changeIn(transaction, { scope, attempt }, completed);
  }

  async recordStep(
    { scope, attempt }: IdempotencyClaim,
    step: StoredStep,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    checkAttempt(attempt);
    const stepped = (record: MemoryRecord): MemoryRecord => ({
      ...record,
      steps: [...record.steps, { name: step.name, result: step.result }],
    });
    if (transaction === undefined) {
      const record = await this.lockedRecord(scope, (record) => isHeldBy(record, attempt));
      if (!record) return false;
      this.records.set(keyOf(scope), stepped(record));
      return true;
    }
    this.ownTransaction(transaction, 'recordStep');
    return this.changeIn(transaction, { scope, attempt }, stepped);
  }

  async release({ scope, attempt }: IdempotencyClaim): Promise<boolean> {
    checkAttempt(attempt);
    const record = await this.lockedRecord(scope, (record) => isHeldBy(record, attempt));
    if (!record) return false;
    const key = keyOf(scope);
    if (record.steps.length === 0) this.records.delete(key);
    else {
      // Kept for the same request to resume from its steps: taken over at once, held by no attempt, awaited by none.
      this.records.set(key, { ...record, attempt: randomUUID(), lockedUntil: this.now(), awaited: false });
    }
    if (record.awaited) this.wake(key);
    return true;
  }

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    // Only while the lease holds: a lapsed one is for the waiter to take over, not to wait on.
    const record = await this.lockedRecord(
      scope,
      (record) => record.status === 'in_progress' && (record.lockedUntil as number) > this.now(),
    );
    if (!record) return false;
    record.awaited = true;
    return true;
  }

  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    const key = keyOf(scope);
    let wake!: () => void;
    const changed = new Promise<void>((resolve) => (wake = resolve));
    const timer = setTimeout(() => done(), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      const waiting = this.waiters.get(key);
      waiting?.delete(done);
      if (waiting?.size === 0) this.waiters.delete(key);
      wake();
    };
    if (!this.waiters.has(key)) this.waiters.set(key, new Set());
    this.waiters.get(key)?.add(done);
    return { changed, listening: Promise.resolve(), cancel: done };
  }

  /** A transaction in which `complete()` stores an outcome that becomes visible on commit. Never waits. */
  async beginTransaction(_timeoutMs?: number): Promise<StoreTransaction> {
    return this.newTransaction();
  }

  /** A transaction holding `scope` until it ends, unless another open one holds it already. Always one: never waits. */
  async beginHoldingTransaction(scope: IdempotencyScope): Promise<StoreTransaction> {
    const transaction = this.newTransaction();
    const key = keyOf(scope);
    if (!this.scopeHolders.has(key)) {
      this.scopeHolders.set(key, transaction);
      transaction.heldScope = key;
    }
    return transaction;
  }

  private newTransaction(): InMemoryStoreTransaction {
    return new InMemoryStoreTransaction(this, {
      commit: (transaction) => {
        for (const [key, record] of transaction.changes) {
          this.records.set(key, record);
          if (record.awaited && record.status === 'completed') this.wake(key);
        }
        this.unlock(transaction);
      },
      rollback: (transaction) => this.unlock(transaction),
    });
  }

  /** As the PostgreSQL store: in progress, not expired, idle past its backoff, idle longest first. */
  async findAbandoned(query: AbandonedQuery): Promise<AbandonedRecord[]> {
    const now = this.now();
    const endpoints = new Set(query.endpoints);
    const idleSince = (record: MemoryRecord) =>
      (record.lockedUntil as number) +
      Math.min(query.maxBackoffSeconds, query.backoffSeconds * 2 ** Math.min(record.attempts - 1, 60)) * 1000;
    const found: Array<{ record: MemoryRecord; abandoned: AbandonedRecord }> = [];
    for (const [key, record] of this.records) {
      const [account, endpoint, scopeKey] = JSON.parse(key) as [string, string, string];
      if (record.status !== 'in_progress' || !endpoints.has(endpoint)) continue;
      if (record.attempts >= (query.maxAttempts ?? Infinity) || record.attempts < (query.minAttempts ?? 0)) continue;
      if (record.expiresAt <= now || idleSince(record) > now) continue;
      const { fingerprint, attempts, steps } = record;
      const scope = { account, endpoint, key: scopeKey };
      found.push({ record, abandoned: { scope, fingerprint, attempts, steps: steps.map(({ name }) => name) } });
    }
    found.sort((a, b) => (a.record.lockedUntil as number) - (b.record.lockedUntil as number));
    return found.slice(0, query.limit).map(({ abandoned }) => abandoned);
  }

  /** Always answers: the records are in this process's memory, and its waits are woken there, with nothing to listen on. */
  async checkHealth(): Promise<StoreHealth> {
    return {};
  }

  /** Deletes at most `batchSize` expired records (none that a transaction is completing); returns how many. */
  async purgeExpired(batchSize: number): Promise<number> {
    if (!Number.isSafeInteger(batchSize) || batchSize < 0) {
      throw new RangeError(`purgeExpired: batchSize must be a non-negative integer, got ${batchSize}`);
    }
    const now = this.now();
    let purged = 0;
    for (const [key, record] of this.records) {
      if (purged >= batchSize) break;
      if (record.expiresAt > now || this.locks.has(key)) continue;
      this.records.delete(key);
      purged += 1;
    }
    return purged;
  }

  /**
   * Changes the record `claim` holds inside `transaction`, locking it until the transaction ends; false when the claim
   * is not held (as the transaction sees it: its own change, or the record once no other transaction writes it).
   */
  private async changeIn(
    transaction: InMemoryStoreTransaction,
    { scope, attempt }: IdempotencyClaim,
    change: (record: MemoryRecord) => MemoryRecord,
  ): Promise<boolean> {
    const key = keyOf(scope);
    transaction.assertOpen();
    for (;;) {
      const lock = this.locks.get(key);
      if (lock?.owner === transaction) {
        // The transaction sees its own change.
        const mine = transaction.changes.get(key);
        if (!mine || !isHeldBy(mine, attempt)) return false;
        transaction.changes.set(key, change(mine));
        return true;
      }
      const record = this.records.get(key);
      if (!record || !isHeldBy(record, attempt)) return false;
      if (lock) {
        await lock.released;
        transaction.assertOpen();
        continue;
      }
      this.lock(key, transaction);
      transaction.changes.set(key, change(record));
      return true;
    }
  }

  /**
   * The record of `scope` when `matches` it, once no transaction is writing it (re-checked after waiting for one,
   * as PostgreSQL re-checks a row it waited for); `undefined` otherwise.
   */
  private async lockedRecord(
    scope: IdempotencyScope,
    matches: (record: MemoryRecord) => boolean,
  ): Promise<MemoryRecord | undefined> {
    const key = keyOf(scope);
    for (;;) {
      const record = this.records.get(key);
      if (!record || !matches(record)) return undefined;
      const lock = this.locks.get(key);
      if (!lock) return record;
      await lock.released;
    }
  }

  private lock(key: string, owner: InMemoryStoreTransaction): void {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    this.locks.set(key, { owner, released, release });
  }

  /** Ends what `transaction` holds: its records' locks, and its scope. */
  private unlock(transaction: InMemoryStoreTransaction): void {
    if (transaction.heldScope !== undefined) this.scopeHolders.delete(transaction.heldScope);
    for (const key of transaction.changes.keys()) {
      const lock = this.locks.get(key);
      if (lock?.owner !== transaction) continue;
      this.locks.delete(key);
      lock.release();
    }
    transaction.changes.clear();
  }

  private ownTransaction(
    transaction: StoreTransaction,
    method: string,
  ): asserts transaction is InMemoryStoreTransaction {
    if (!(transaction instanceof InMemoryStoreTransaction) || transaction.store !== this) {
      throw new Error(`InMemoryIdempotencyStore.${method}() was given a transaction of another store`);
    }
  }

  private wake(key: string): void {
    for (const waiter of [...(this.waiters.get(key) ?? [])]) waiter();
  }
}

/** A transaction of the in-memory store: the outcomes and steps stored in it, applied on commit. */
class InMemoryStoreTransaction implements StoreTransaction {
  /** The records this transaction changed, as it left them. */
  readonly changes = new Map<string, MemoryRecord>();
  /** The scope (its key) this transaction holds while it is open, if it holds one. */
  heldScope?: string;
  private state: 'open' | 'committed' | 'rolled back' | 'abandoned' = 'open';

  constructor(
    readonly store: InMemoryIdempotencyStore,
    private readonly ending: {
      commit(transaction: InMemoryStoreTransaction): void;
      rollback(transaction: InMemoryStoreTransaction): void;
    },
  ) {}

  /** True once abandoned: as with the PostgreSQL store, whose connection is then cut, nothing of it can commit. */
  get connectionLost(): boolean {
    return this.state === 'abandoned';
  }

  async commit(): Promise<void> {
    this.assertOpen();
    this.state = 'committed';
    this.ending.commit(this);
  }

  /** Discards what the transaction stored; does nothing once it has ended. */
  async rollback(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'rolled back';
    this.ending.rollback(this);
  }

  /** Rolls back at once (the PostgreSQL store cuts the connection, which rolls back); a later commit rejects. */
  abandon(): void {
    if (this.state !== 'open') return;
    this.state = 'abandoned';
    this.ending.rollback(this);
  }

  assertOpen(): void {
    if (this.state !== 'open') throw new Error(`The in-memory store's transaction has already ${this.state}`);
  }
}

function keyOf(scope: IdempotencyScope): string {
  return JSON.stringify([scope.account, scope.endpoint, scope.key]);
}

/** Held by `attempt`: the claim is renewed, completed or released by its holder only, lapsed or not. */
function isHeldBy(record: MemoryRecord, attempt: string): boolean {
  return record.status === 'in_progress' && record.attempt === attempt;
}

/** Attempts are UUIDs, as the PostgreSQL store's column requires; anything else is refused the same way. */
function checkAttempt(attempt: string): void {
  if (typeof attempt !== 'string' || !UUID.test(attempt)) {
    throw new TypeError(`invalid input syntax for type uuid: ${JSON.stringify(attempt)}`);
  }
}

function existingRecord(record: MemoryRecord, now: number): ExistingRecord {
  if (record.status === 'completed') {
    return {
      status: 'completed',
      fingerprint: record.fingerprint,
      response: copyResponse(record.response as StoredResponse),
      expiresInSeconds: (record.expiresAt - now) / 1000,
    };
  }
  return { status: 'in_progress', fingerprint: record.fingerprint };
}

function copySteps(steps: StoredStep[]): StoredStep[] {
  return steps.map(({ name, result }) => ({ name, result }));
}

/** A copy, as a database returns one: what the caller does with it later changes nothing stored. */
function copyResponse(response: StoredResponse): StoredResponse {
  return {
    status: response.status,
    headers: JSON.parse(JSON.stringify(response.headers)) as StoredResponse['headers'],
    body: Buffer.from(response.body),
  };
}
