import type { ExecutionContext } from '@nestjs/common';
import type { IdempotencyScope, StoredResponse } from './idempotency-store.interface.js';

/** Returns the account (tenant) a request belongs to; keys are scoped by it. */
export type AccountResolver = (context: ExecutionContext) => string | Promise<string>;

/** The protocol's options that `@Idempotent()` (or `execute()`) may set per route or operation; they override the module's. */
export interface ProtocolIdempotentOptions {
  /**
   * Run the handler in one transaction of the store that also stores its outcome, so that its own writes (made
   * through the store's context for the run, see the store's docs) and the stored response commit together or not at all. Default: `false`.
   */
  transactional?: boolean;
  /**
   * What a request finds when its key is still in progress: `'conflict'` answers 409 at once; `'wait'` waits
   * up to `inFlightWaitSeconds` for the first attempt's outcome, then answers with it (or 409). Default: `'conflict'`.
   */
  inFlight?: 'conflict' | 'wait';
  /** How long `inFlight: 'wait'` waits. Default: 5 s. */
  inFlightWaitSeconds?: number;
  /** How long a completed outcome is kept and replayed, counted from completion. Default: 86 400 s (24 h). */
  ttlSeconds?: number;
  /**
   * How long an in-progress claim blocks other attempts before a retry may take it over. While the handler
   * runs, the lease is renewed every third of it. Default: 60 s.
   */
  leaseSeconds?: number;
  /** A handler running longer than this stops renewing its lease, so that a retry can take a hung one over. Default: 300 s. */
  maxHoldSeconds?: number;
  /** `Retry-After` sent with 409 `request_in_progress` and 503 `idempotency_store_unavailable`. Default: 2 s. */
  retryAfterSeconds?: number;
  /**
   * The account (tenant) of a request; keys are scoped by it. Default: none, in which case the module must be
   * given `singleTenant: true`, or it refuses to start.
   */
  accountResolver?: AccountResolver;
  /**
   * Decides what of a final outcome is stored, and so what every replay returns: it gets the outcome about to be
   * stored (already without what its transport never
   * stores) and returns what to store instead (a body
   * without a card number, say). The first client gets the full response; its retries get what is stored, so never
   * drop what a client needs to act (a created resource's id). A hook that throws never gets the outcome stored: on
   * a transactional route the writes roll back, the claim is released and the client answered 500
   * `idempotency_misconfigured`; elsewhere the work stands, so a stand-in is stored that the client and every retry
   * are answered 500 `idempotency_outcome_withheld` with, never running the handler again.
   * Default: none (the outcome is stored as it was sent).
   */
  redact?: OutcomeRedaction;
}

/** What of an outcome is stored (see `redact`); synchronous, and it must not throw. */
export type OutcomeRedaction = (outcome: StoredResponse, scope: IdempotencyScope) => StoredResponse;

/** Encryption at rest of stored outcomes' headers and bodies (AES-256-GCM), see docs/encryption.md. */
export interface OutcomeEncryptionOptions {
  /**
   * The key ring, newest first: the first key seals new records, every key opens the records it sealed. A key is
   * 32 bytes, as a `Buffer` or its base64; an id is 1..255 bytes of UTF-8, and names its key in each record. Not empty.
   */
  keys: Array<{ id: string; key: Buffer | string }>;
  /**
   * Replay records stored in plaintext (before encryption was turned on) rather than refuse them, for one TTL of
   * switch-over; a plaintext record is refused otherwise (`idempotency_record_unreadable`), since one written
   * into the table by hand would be replayed as is. Default: `false`.
   */
  acceptPlaintext?: boolean;
}

/**
 * The completer's schedule and bounds (`IdempotencyCompleter`, docs/steps.md): operations registered with it whose
 * attempt was abandoned are claimed again, one after another, until they complete or it gives up on them.
 */
export interface CompleterOptions {
  /**
   * Looks for abandoned operations every so many seconds, once the application has started; the timer never keeps the
   * process alive and stops on shutdown. `false`: only when `IdempotencyCompleter.completeAbandoned()` is called.
   * Default: 30 s.
   */
  intervalSeconds?: number | false;
  /** Operations claimed per look, one after another. Default: 10. */
  batchSize?: number;
  /**
   * Gives up on an operation once this many attempts have claimed it (a client's retries and a message's deliveries
   * count as the completer's do): its record stays in progress, for an operator to see and release, or until it
   * expires. Default: 5.
   */
  maxAttempts?: number;
  /**
   * How long an operation is left alone after its lease ended, before the completer claims it: a client's retry
   * usually comes first. Doubled for each attempt that has claimed it, up to `maxBackoffSeconds`. Default: 10 s.
   */
  backoffSeconds?: number;
  /** The longest the backoff grows. Default: 3600 s. */
  maxBackoffSeconds?: number;
}

/** The protocol's options of `IdempotencyModule.forRoot()`. */
export interface ProtocolModuleOptions extends ProtocolIdempotentOptions {
  /**
   * The API has one tenant, or its keys are unique across tenants: keys are scoped per endpoint only. The module
   * refuses to start unless it is given either this or `accountResolver` (not both). Default: `false`.
   */
  singleTenant?: boolean;
  /**
   * Bound on each store operation. A claim that takes longer is answered with 503
   * `idempotency_store_unavailable`; a finalize that takes longer lets the response go and is logged. Default: 5 s.
   */
  storeTimeoutSeconds?: number;
  /**
   * Retries of a finalize that failed (the database was lost after the work), with exponential backoff from
   * 250 ms; the response is not held meanwhile. Default: 5.
   */
  finalizeRetries?: number;
  /**
   * Completed outcomes this process keeps in memory, so that their replays (and refusals of their keys with
   * another request) skip the database. A completed record does not change until it expires, so an entry
   * answers what the database would; it is dropped when its record expires or after `maxAgeSeconds`, whichever
   * is first. `false` turns it off. Default: `{ maxEntries: 10_000, maxBytes: 16 MiB, maxAgeSeconds: 60 }`.
   */
  replayCache?: false | { maxEntries?: number; maxBytes?: number; maxAgeSeconds?: number };
  /**
   * On shutdown (`app.enableShutdownHooks()` or `app.close()`), how long attempts still running may take to
   * finish and store their outcomes; new claims are refused meanwhile (503 `idempotency_shutting_down`). Those
   * still running then are released (transactional: rolled back) and answered 503. Keep it below your platform's
   * grace period (Kubernetes: 30 s). Default: 10 s.
   */
  shutdownTimeoutSeconds?: number;
  /**
   * Purge expired records every so many seconds, in batches of `purgeBatchSize`; the timer never keeps the process
   * alive and stops on shutdown. `false` turns it off (for a purge of your own, `IdempotencyService.purgeExpired()`).
   * Default: 300 s.
   */
  purgeIntervalSeconds?: number | false;
  /** Records deleted per purge statement. Default: 1000. */
  purgeBatchSize?: number;
  /**
   * Encrypts the headers and body of each stored outcome with the newest key of a ring (AES-256-GCM, bound to the
   * record's scope); a record that cannot be decrypted is never replayed nor run again (500
   * `idempotency_record_unreadable`). Default: none (outcomes are stored in plaintext).
   */
  encryption?: OutcomeEncryptionOptions;
  /** The completer's schedule and bounds, for the operations registered with `IdempotencyCompleter`. */
  completer?: CompleterOptions;
}
