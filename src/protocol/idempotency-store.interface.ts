/** Who may collide with whom: one record per (account, endpoint, key), never a global key. */
export interface IdempotencyScope {
  account: string;
  /** Method and route template, e.g. `POST /v1/charges/:id/refunds`. */
  endpoint: string;
  key: string;
}

/** A response as it was sent: replayed byte for byte. */
export interface StoredResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

/** The record that held the scope when a claim did not win it. */
export type ExistingRecord =
  | { status: 'in_progress'; fingerprint: string }
  | {
      status: 'completed';
      fingerprint: string;
      response: StoredResponse;
      /** Left before it expires. */ expiresInSeconds: number;
    };

/**
 * A step of an operation that an attempt completed (its recovery point): a later attempt at the same operation skips
 * it and gets its result.
 */
export interface StoredStep {
  /** The step's name, unique within its operation. */
  name: string;
  /** Its result as the module stores it: JSON text, or an envelope when outcomes are encrypted. Opaque to the store. */
  result: string;
}

export type ClaimResult =
  /**
   * `takeover`: the claim took over an in-progress record whose lease had lapsed, whose holder transaction had ended
   * (its holder may have died), or whose claim was released with steps (`release`). `steps`: the steps earlier
   * attempts completed, in the order they were recorded; absent when there are none.
   */
  { claimed: true; takeover: boolean; steps?: StoredStep[] } | { claimed: false; existing: ExistingRecord };

export interface ClaimTiming {
  /** The claim blocks other attempts this long. */
  leaseSeconds: number;
  /** An abandoned claim (never completed, never retried) expires this long after its lease. */
  ttlSeconds: number;
}

/** The claim an attempt holds; only its holder (same `attempt` token) may renew, complete or release it. */
export interface IdempotencyClaim {
  scope: IdempotencyScope;
  attempt: string;
}

/**
 * A database transaction of the store's, in which a handler's own writes and its outcome commit together. How the
 * handler reaches it is the store's to say (its context for the run, see `IdempotencyContext`).
 */
export interface StoreTransaction {
  commit(): Promise<void>;
  rollback(): Promise<void>;
  /** Whether the transaction's connection was lost (nothing of it can commit any more). */
  readonly connectionLost: boolean;
  /** Cuts the transaction's connection: the database rolls back what was not committed, and the connection is not reused. */
  abandon(): void;
}

/**
 * An operation in progress that no attempt holds any more (its lease lapsed, or its claim was released with steps),
 * as the completer finds it (`IdempotencyStore.findAbandoned`).
 */
export interface AbandonedRecord {
  scope: IdempotencyScope;
  /** The fingerprint it was claimed with, which the completer claims it with again. */
  fingerprint: string;
  /** How many attempts have claimed it so far (a client's, a redelivery's, the completer's). */
  attempts: number;
  /** The names of the steps its attempts recorded, in order. */
  steps: string[];
}

/** Which abandoned records `findAbandoned` answers. */
export interface AbandonedQuery {
  /** Those of these endpoints only (not empty). */
  endpoints: string[];
  /** Those claimed fewer times than this (the completer gave up on the others). Default: no bound. */
  maxAttempts?: number;
  /** Those claimed at least this many times (the completer's `gaveUp()` lists those past its own bound). Default: 0. */
  minAttempts?: number;
  /**
   * Those left alone since their lease ended at least `min(backoffSeconds * 2^(attempts - 1), maxBackoffSeconds)` (0:
   * any whose lease has ended):
   * the longer an operation has failed, the longer it waits for its next attempt.
   */
  backoffSeconds: number;
  maxBackoffSeconds: number;
  /** At most this many, those idle longest first. */
  limit: number;
}

/** What a store's health check found (`IdempotencyStore.checkHealth`). */
export interface StoreHealth {
  /**
   * Whether the store listens for outcomes (waits for an attempt in flight are woken through it): `undefined` when
   * it needs no listening to wait (it polls, or waits in its own memory), or nothing has needed it yet.
   */
  listening?: boolean;
}

/** What a health check asks of a store beyond a round trip. */
export interface StoreHealthCheck {
  /**
   * Attempts wait for outcomes (the module's `inFlight: 'wait'`): check listening even if no attempt has waited yet.
   * Default: `false` (checked once an attempt has waited).
   */
  listen?: boolean;
}

/** Storage of idempotency records. Every time comparison is made on the store's clock. */
export interface IdempotencyStore {
  /**
   * Atomically claims the scope for `attempt`: inserts a new in-progress record, or takes over one that
   * has expired or whose lease has lapsed (same fingerprint only), or, same fingerprint only, one claimed for a holder
   * transaction (`beginHoldingTransaction`) that has ended without completing it. The claim is committed when this
   * resolves, on its own: `holder` is the transaction the attempt will run in, opened before the claim, not the one
   * the claim is written in. Whether `holder` holds `scope` is decided when the claim is made, not when it was asked
   * for: a claim that reaches the store after its holder ended (it waited past its timeout) holds nothing.
   */
  claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
    holder?: StoreTransaction,
  ): Promise<ClaimResult>;
  /** Extends the lease of a claim still held; false when it is no longer held by this attempt. */
  renew(claim: IdempotencyClaim, timing: ClaimTiming): Promise<boolean>;
  /**
   * Stores the outcome, inside `transaction` when given; false when the claim is no longer held.
   * Attempts waiting for the outcome (those that called `markAwaited`) are woken when it commits.
   */
  complete(
    claim: IdempotencyClaim,
    response: StoredResponse,
    ttlSeconds: number,
    transaction?: StoreTransaction,
  ): Promise<boolean>;
  /**
   * Gives the claim up so that a retry runs again; false when the claim is no longer held. A record without steps is
   * deleted (the next claim is new, for any request); one with steps is kept in progress with its lease ended, so that
   * the same request takes it over at once and resumes from its steps (another request is refused until it expires).
   * Attempts awaiting the outcome are woken when it commits.
   */
  release(claim: IdempotencyClaim): Promise<boolean>;
  /**
   * Records a step the claim's attempt completed, after those the record holds, inside `transaction` when given (it
   * commits with the step's own writes); false when the claim is no longer held (nothing is recorded). A store
   * without it runs no stepped operation.
   */
  recordStep?(claim: IdempotencyClaim, step: StoredStep, transaction?: StoreTransaction): Promise<boolean>;
  /**
   * The records in progress, not expired, that no attempt holds and that the query selects (see `AbandonedQuery`), for
   * the completer (`IdempotencyCompleter`) to claim again. A store without it runs no completer.
   */
  findAbandoned?(query: AbandonedQuery): Promise<AbandonedRecord[]>;
  /**
   * Asks for the waiters of `scope` (`waitForChange`) to be woken when its in-progress record is completed or
   * released; false when it no longer is in progress with a live lease (claim again).
   */
  markAwaited(scope: IdempotencyScope): Promise<boolean>;
  /**
   * `changed` resolves when the record of `scope` may have been completed or released, or after `timeoutMs`;
   * `listening` once changes are being listened for (or listening failed, leaving only the timeout).
   */
  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void };
  /**
   * Starts a transaction on a connection of its own, waiting at most `timeoutMs` for the store to allow one more
   * (a store may keep connections free for claims); past it, rejects and takes none later.
   */
  beginTransaction(timeoutMs?: number): Promise<StoreTransaction>;
  /**
   * Opens, before the claim of `scope`, the transaction its attempt will run in, if the store allows one more at once;
   * `undefined` when it does not (the attempt then claims without it, and opens its transaction after the claim).
   * While it is open it holds `scope`, unless another open transaction already does. A claim made with it as `holder`
   * while it holds `scope` can be taken over by the same request as soon as it ends (committed, rolled back, abandoned,
   * its connection lost) with the record still in progress, without waiting for the lease: its attempt's process died,
   * or nothing of its work can commit any more.
   */
  beginHoldingTransaction(scope: IdempotencyScope): Promise<StoreTransaction | undefined>;
  /**
   * Checks at start-up that the store can work (its table exists with the columns and key it needs); rejects with an
   * `IdempotencySetupError` that names the fix when it cannot, or with another error when it could not tell.
   */
  checkSchema?(): Promise<void>;
  /**
   * Why the store runs no transactional handler (its records share no transaction with the application's data), and
   * what to use instead; `undefined` (the default) when it runs them. The module then refuses to start with a
   * transactional handler, naming it, and `beginTransaction` is never called.
   */
  readonly transactionsRefused?: string;
  /**
   * The records live in this process only (its memory), not shared by the application's other instances nor kept
   * across a restart: the module warns at start-up that a retry reaching another instance runs again.
   */
  readonly processLocal?: boolean;
  /**
   * How many attempts the store serves at once without making one wait for another (a store on a pool of
   * connections: the connections it may hold at once). Message consumers claim and run at most so many messages at once by
   * default, holding the others. Default: unbounded.
   */
  readonly capacity?: number;
  /**
   * Checks within `timeoutMs` that the store answers (one round trip), and, when attempts wait for outcomes
   * (`check.listen`, or an attempt has waited), that it listens for them, opening its listening again if it was lost,
   * as the next wait would; rejects when the store does not answer, or not within `timeoutMs`. For health checks
   * (`nest-idempotency/terminus`).
   */
  checkHealth?(timeoutMs: number, check?: StoreHealthCheck): Promise<StoreHealth>;
  /** Deletes at most `batchSize` expired records; returns how many it deleted. */
  purgeExpired(batchSize: number): Promise<number>;
  /** Gives back what the store holds (a listening connection); called on shutdown once no attempt runs. */
  close?(): Promise<void>;
}
