import { createHash, randomUUID } from 'node:crypto';
import type { Attributes } from '@opentelemetry/api';
import { Inject, Injectable, Logger } from '@nestjs/common';
import {
  type IdempotencyError,
  IdempotencyKeyReuseError,
  IdempotencyOperationInvalidError,
  IdempotencyOutcomeWithheldError,
  IdempotencyRecordUnreadableError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  RequestInProgressError,
  type KeyTerms,
} from './idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './idempotency.tokens.js';
import {
  checkTenancy,
  type IdempotencyPolicy,
  resolvePolicy,
  resolvePurgeSettings,
  resolveReplayCacheLimits,
  resolveShutdownTimeout,
} from './idempotency-policy.js';
import { canonicalJson } from '../shared/canonical-json.js';
import { currentRun, runWithin } from './current-run.js';
import { describedValue } from './described-value.js';
import type { ProtocolModuleOptions, ProtocolIdempotentOptions } from './idempotency-options.interface.js';
import { IdempotencyRun } from './idempotency-run.js';
import { assertFaithfulJson } from './json-input.js';
import type { JsonResult } from './jsonified.js';
import type {
  ClaimResult,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from './idempotency-store.interface.js';
import { ReplayCache } from './replay-cache.js';
import { ExpiredRecordsPurge } from './expired-records-purge.js';
import { InFlightWait } from './in-flight-wait.js';
import { LeaseRenewals } from './lease-renewals.js';
import { type AttemptOutcome, ClaimEnding } from './claim-ending.js';
import { describeScope, withTimeout } from './store-bounds.js';
import {
  type ClaimedRequest,
  type DrainParticipant,
  type RunningAttempt,
  RunningAttempts,
} from './running-attempts.js';
import { keyFault, scopeTextFault } from './scope-values.js';
import { OutcomeSealing } from './outcome-sealing.js';
import { EnvelopeUnreadableError } from './outcome-envelope.js';
import { OnceLog } from './once-log.js';
import { IdempotencyTelemetry, type IdempotencyOutcome, callAttributes } from './idempotency-telemetry.js';
import { timedStore } from './timed-store.js';
import { isWithheldOutcome } from './withheld-outcome.js';
import { publishIdempotencyEvent } from './idempotency-events.js';

/** What an attempt does next: run the work under its claim, or replay the stored outcome. */
export type IdempotencyDecision =
  | { action: 'run'; run: IdempotencyRun }
  | {
      action: 'replay';
      response: StoredResponse;
      /** Where the outcome was found: this process's replay cache, or the store. */
      from: 'memory' | 'store';
    };

/** An operation outside HTTP (a queue message, a cron run, a workflow step) and its key. */
export interface IdempotentOperation {
  /** What the operation is, e.g. `payout`: keys are scoped by it, like HTTP keys by endpoint. Not empty. */
  name: string;
  /**
   * The operation's key: created once where the intent is formed, and persisted with it. 1..255 visible ASCII
   * characters, as an HTTP key.
   */
  key: string;
  /** The tenant, as for HTTP (not empty). Default: none. */
  account?: string;
  /**
   * What the operation does: the same key with another input is refused. Plain objects, arrays, strings, finite
   * numbers, booleans and null only (a Date as its ISO string, say), so that different inputs never look alike. Default: none.
   */
  input?: unknown;
}

export interface ExecuteResult<T> {
  /**
   * The work's result as stored, through JSON (a `Date` comes back a string, nothing comes back `null`): the same on
   * the first run and on every replay.
   */
  result: JsonResult<T>;
  /** The work ran in an earlier call; this one returned its stored result. */
  replayed: boolean;
}

/**
 * The protocol, independent of HTTP: claim the key, compare fingerprints, replay or run, then finalize.
 */
@Injectable()
export class IdempotencyService {
  private readonly logger = new Logger('Idempotency');
  /** The module's options resolved (and checked, so that invalid ones refuse the start): `execute()`'s base. */
  private readonly modulePolicy: IdempotencyPolicy;
  private readonly purge: ExpiredRecordsPurge;
  private readonly leases: LeaseRenewals;
  private readonly replays: ReplayCache;
  /** The attempts between their claim and their finish, and the shutdown's drain of them. */
  private readonly attempts: RunningAttempts;
  /** Where every claim ends: stored, released, or its transaction cut. */
  private readonly claims: ClaimEnding;
  /** What of an outcome the store holds: sealed on the way in, opened (or refused) on the way out. */
  private readonly sealing: OutcomeSealing;
  /** Unreadable records are logged once per scope, however often their keys are retried. */
  private readonly unreadableLog = new OnceLog(this.logger);
  /** The module's metrics and spans (no-ops without an OpenTelemetry SDK). */
  private readonly telemetry = new IdempotencyTelemetry();
  /** The store, each operation timed. */
  private readonly store: IdempotencyStore;

  constructor(
    @Inject(IDEMPOTENCY_STORE) store: IdempotencyStore,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: ProtocolModuleOptions,
  ) {
    store = this.store = timedStore(store, this.telemetry);
    this.modulePolicy = resolvePolicy(options);
    checkTenancy(options);
    this.purge = new ExpiredRecordsPurge(store, resolvePurgeSettings(options).batchSize);
    this.replays = new ReplayCache(resolveReplayCacheLimits(options));
    this.attempts = new RunningAttempts(this.logger, resolveShutdownTimeout(options));
    this.sealing = OutcomeSealing.from(options.encryption);
    this.claims = new ClaimEnding(store, this.logger, this.sealing, this.telemetry, (run, response, policy) =>
      this.rememberOutcome(run, response, policy),
    );
    this.leases = new LeaseRenewals(
      store,
      this.logger,
      (transaction, policy) => void this.claims.cut(transaction, policy),
    );
  }

  /**
   * Graceful shutdown's drain: new claims are refused (503 + `Retry-After`), running attempts get up to
   * `shutdownTimeoutSeconds` to finish and store their outcomes, and those still running then are ended: their claims
   * released (transactional: their writes rolled back by cutting their connections) and their clients answered 503,
   * so that a retry runs on another instance. It runs once: later calls await the same drain. It must end before the
   * application's providers are destroyed, which running work still uses: an HTTP application drains in its adapter's
   * `beforeClose()`, which `app.close()` awaits before any shutdown hook; an application context calls it itself.
   */
  async drain(): Promise<void> {
    await this.attempts.drain((run, attempt) => this.abandon(run, attempt));
    this.leases.stopAll();
  }

  /** Whether shutdown's drain has begun: new claims are refused (but those of work in hand), the instance is going. */
  get shuttingDown(): boolean {
    return this.attempts.drainBegun;
  }

  /** How many attempts the store serves at once (`IdempotencyStore.capacity`); `undefined` when it does not say. */
  get storeCapacity(): number | undefined {
    return this.store.capacity;
  }

  /**
   * Adds work that the drain waits for besides the running attempts, and stops taking more when it begins: a message
   * consumer's messages in hand, claimed during the drain too (until its wait is over), so that none is given back.
   */
  addDrainParticipant(participant: DrainParticipant): void {
    this.attempts.addParticipant(participant);
  }

  /** Registers how the attempt's client is answered if shutdown ends the attempt before its handler is done. */
  onAbandoned(run: IdempotencyRun, answer: (error: IdempotencyError) => void): void {
    this.attempts.onAbandoned(run, answer);
  }

  /** Ends an attempt the drain could not wait for: its claim released (its writes rolled back), its client told. */
  private async abandon(run: IdempotencyRun, attempt: RunningAttempt): Promise<void> {
    const { policy } = attempt;
    this.leases.stop(run);
    this.logger.warn(
      `Shutting down: the handler of ${describeScope(run.scope)} did not finish within shutdownTimeoutSeconds ` +
        `(${this.attempts.timeoutSeconds} s); its claim is released${run.transaction ? ' and its writes rolled back' : ''}.`,
    );
    if (run.transaction) await this.claims.cut(run.transaction, policy);
    await this.claims.release(run.claim, policy);
    attempt.onAbandoned?.(new IdempotencyShuttingDownError(policy.retryAfterSeconds, true));
  }

  /**
   * One lookup, four outcomes: a new key is claimed (run the work); a key used with a different request
   * is refused (422); a key still in progress is refused with a retry hint (409), or, with `inFlight: 'wait'`,
   * awaited for a while; a completed key is replayed. The claim is committed before this resolves, so the
   * work never runs inside the claim's transaction. `call` says how metrics and spans name it (its transport, default
   * `operation`, and its endpoint's label, default the scope's endpoint), and whether the process already holds the work
   * (`inHand`: a consumer's message, claimed while the drain waits for it rather than refused as shutting down).
   */
  async begin(
    scope: IdempotencyScope,
    fingerprint: string,
    policy: IdempotencyPolicy,
    terms: KeyTerms,
    call: { transport?: string; endpointLabel?: string; inHand?: boolean } = {},
  ): Promise<IdempotencyDecision> {
    const { transport = 'operation', inHand = false } = call;
    const attributes = callAttributes(transport, call.endpointLabel ?? scope.endpoint);
    const decision = await this.telemetry.inSpan('idempotency claim', attributes, async (span) => {
      try {
        const decided = await this.decide(scope, fingerprint, policy, { terms, inHand }, attributes);
        const outcome = outcomeOf(decided);
        span.setAttribute('idempotency.outcome', outcome);
        this.telemetry.count(outcome, attributes);
        return decided;
      } catch (error) {
        const refused = refusalOutcome(error);
        if (refused) this.telemetry.count(refused, attributes);
        throw error;
      }
    });
    // Started outside the claim's span: the run is its sibling, under the call's span.
    if (decision.action === 'run') this.telemetry.runStarted(decision.run, attributes);
    return decision;
  }

  private async decide(
    scope: IdempotencyScope,
    fingerprint: string,
    policy: IdempotencyPolicy,
    { terms, inHand }: Pick<ClaimedRequest, 'terms' | 'inHand'>,
    attributes: Attributes,
  ): Promise<IdempotencyDecision> {
    // A completed record does not change until it expires: one this process has seen is answered from memory.
    const cached = this.replays.get(scope);
    if (cached) {
      if (cached.fingerprint !== fingerprint) throw new IdempotencyKeyReuseError(terms);
      return replayOf(cached.response, 'memory');
    }
    const claim: IdempotencyClaim = { scope, attempt: randomUUID() };
    this.telemetry.claimedFor(claim, attributes);
    let waited = false;
    const wait = new InFlightWait(this.store, this.logger, scope, policy);
    for (;;) {
      if (this.attempts.refuses(inHand)) throw new IdempotencyShuttingDownError(policy.retryAfterSeconds);
      const waiting = await wait.listen();
      const since = this.replays.now();
      const holder = await this.openHolder(scope, policy).catch((error: unknown) => {
        wait.stop();
        throw error;
      });
      const result = await this.claim(claim, fingerprint, policy, holder).catch((error: unknown) => {
        wait.stop();
        if (holder) void this.claims.discard(holder, policy);
        throw error;
      });
      if (result.claimed) {
        wait.stop();
        if (result.takeover) publishIdempotencyEvent('takeover', () => ({ scope, attempt: claim.attempt }));
        const request = { fingerprint, since, terms, inHand };
        return { action: 'run', run: await this.startAttempt(claim, result.takeover, request, policy, holder) };
      }
      if (holder) void this.claims.discard(holder, policy); // the answer does not wait for its rollback
      const { existing } = result;
      const response = existing.status === 'completed' ? this.readable(scope, existing.response) : undefined;
      if (existing.status === 'completed' && response) {
        this.replays.remember(scope, { fingerprint: existing.fingerprint, response }, existing.expiresInSeconds, since);
      }
      if (existing.fingerprint !== fingerprint) {
        wait.stop();
        throw new IdempotencyKeyReuseError(terms); // whether or not its outcome can be read
      }
      if (existing.status === 'completed') {
        wait.stop();
        if (!response) throw new IdempotencyRecordUnreadableError();
        return replayOf(response, 'store');
      }
      if (!waiting) throw new RequestInProgressError(policy.retryAfterSeconds, terms);
      if (!waited) this.telemetry.count('waited', attributes); // once per attempt that waits
      waited = true;
      await wait.untilChanged(); // then claim again: the outcome is replayed, or a released key is claimed
    }
  }

  /**
   * A completed record's outcome as it was stored, or `undefined` when it cannot be read (it does not decrypt),
   * reported: such a record is refused, never replayed, and its work never run again under the key (that could do it
   * twice).
   */
  private readable(scope: IdempotencyScope, stored: StoredResponse): StoredResponse | undefined {
    try {
      return this.sealing.open(scope, stored);
    } catch (error) {
      if (!(error instanceof EnvelopeUnreadableError)) throw error;
      const { reason } = error;
      publishIdempotencyEvent('recordUnreadable', () => ({ scope, reason }));
      this.unreadableLog.error(
        describeScope(scope),
        `The stored outcome of ${describeScope(scope)} cannot be read: ${reason}. It is refused with 500 ` +
          'idempotency_record_unreadable, never replayed nor run again: put the key that sealed it back in ' +
          'encryption.keys (or set encryption.acceptPlaintext during a switch-over), or delete the record once its ' +
          'outcome is known to the client another way.',
      );
      return undefined;
    }
  }

  /**
   * Starts the run of a claim: its transaction (if any) and its lease. Counted by shutdown while it waits for its
   * transaction slot, so that the drain waits for it too; one that shutdown began meanwhile is given back.
   */
  private async startAttempt(
    claim: IdempotencyClaim,
    takeover: boolean,
    request: ClaimedRequest,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<IdempotencyRun> {
    const run = await this.attempts.starts(() => this.startRun(claim, takeover, policy, holder), request, policy);
    if (this.attempts.refuses(request.inHand)) {
      await this.finish(run, { response: undefined, failed: true, final: false }, policy);
      throw new IdempotencyShuttingDownError(policy.retryAfterSeconds);
    }
    return run;
  }

  /**
   * Ends the attempt. A final outcome is stored for replay; anything else (no storable response, a 400,
   * a 5xx) releases the claim so that a retry runs again. On a transactional route, a final outcome commits
   * with the handler's writes, and anything else rolls them back. Returns the error the client must get
   * instead of the response when the outcome could not be committed; `undefined` otherwise.
   */
  async finish(
    run: IdempotencyRun,
    outcome: AttemptOutcome,
    policy: IdempotencyPolicy,
  ): Promise<IdempotencyError | undefined> {
    this.leases.stop(run);
    const attempt = this.attempts.get(run);
    try {
      if (attempt?.abandoned) return new IdempotencyShuttingDownError(policy.retryAfterSeconds, true);
      if (attempt) attempt.finishing = true; // shutdown waits for its outcome to be written, and never cuts it off
      const attributes = this.telemetry.runEnded(run);
      return await this.telemetry.inSpan('idempotency finalize', attributes, async () => {
        const refusal = await this.claims.end(run, outcome, policy, () => this.termsOf(run));
        const refused = refusalOutcome(refusal);
        if (refused) this.telemetry.count(refused, attributes);
        return refusal;
      });
    } finally {
      this.attempts.ended(run);
    }
  }

  private termsOf(run: IdempotencyRun): KeyTerms {
    const request = this.attempts.get(run);
    if (!request) throw new Error(`The run of ${describeScope(run.scope)} was not started by this IdempotencyService`);
    return request.terms;
  }

  /** Caches an outcome this process stored. Its record expires `ttlSeconds` after its store, itself after the claim. */
  private rememberOutcome(run: IdempotencyRun, response: StoredResponse, policy: IdempotencyPolicy): void {
    const claimed = this.attempts.get(run);
    if (claimed)
      this.replays.remember(
        run.scope,
        { fingerprint: claimed.fingerprint, response },
        policy.ttlSeconds,
        claimed.since,
      );
  }

  /**
   * Runs `work` once per operation key, for callers that are not HTTP requests, with the same claim,
   * fingerprint comparison, lease, TTL and (with `transactional: true`) transaction as the HTTP routes:
   * a completed operation returns its stored result; one still running throws `RequestInProgressError`;
   * the same key with another input throws `IdempotencyKeyReuseError`; a name, key or account the HTTP edge would
   * refuse too (an empty or 300-character key) throws `IdempotencyOperationInvalidError`, and an input JSON cannot
   * represent faithfully (a Map, a Set, a Date, `undefined`…) a `TypeError` naming where it is, both before anything
   * is claimed. A failing `work` releases the key (its transaction rolls back) and its error is rethrown. `work` sees
   * its run in `IdempotencyContext` too.
   */
  async execute<T>(
    operation: IdempotentOperation,
    work: (run: IdempotencyRun) => Promise<T>,
    options: ProtocolIdempotentOptions = {},
  ): Promise<ExecuteResult<T>> {
    const policy = resolvePolicy(this.modulePolicy, options);
    const scope = scopeOfOperation(operation);
    assertFaithfulJson(operation.input ?? null, 'input'); // before anything is claimed
    const fingerprint = createHash('sha256')
      .update(canonicalJson(operation.input ?? null))
      .digest('hex');
    // Within an attempt of work in hand (a consumer's message), the operation is in hand too: run during the drain.
    const within = currentRun();
    const inHand = (within && this.attempts.get(within)?.inHand) ?? false;
    const terms = { key: `key of operation ${JSON.stringify(operation.name)}`, usedWith: 'input' } as const;
    const decision = await this.begin(scope, fingerprint, policy, terms, { inHand });
    if (decision.action === 'replay') return { result: parseResult<T>(decision.response), replayed: true };

    const { run } = decision;
    let body: Buffer;
    try {
      body = Buffer.from(JSON.stringify((await runWithin(run, () => work(run))) ?? null));
    } catch (error) {
      await this.finish(run, { response: undefined, failed: true, final: false }, policy);
      throw error;
    }
    const response = { status: 200, headers: { 'content-type': 'application/json' }, body };
    const refusal = await this.finish(run, { response, failed: false, final: true }, policy);
    if (refusal) throw refusal;
    return { result: parseResult<T>(response), replayed: false };
  }

  /**
   * Deletes every expired record, one bounded batch (default `purgeBatchSize`) per statement; returns how many it
   * deleted. For a purge of your own, with `purgeIntervalSeconds: false`.
   */
  purgeExpired(batchSize?: number): Promise<number> {
    return this.purge.purge(batchSize);
  }

  private claim(
    claim: IdempotencyClaim,
    fingerprint: string,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<ClaimResult> {
    const timing = { leaseSeconds: policy.leaseSeconds, ttlSeconds: policy.ttlSeconds };
    const claiming = this.store.claim(claim.scope, fingerprint, claim.attempt, timing, holder);
    return withTimeout(claiming, policy, 'claim').catch((error: unknown) => {
      this.logger.error(`Claiming ${describeScope(claim.scope)} failed (the store is unavailable): ${error}`);
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'claim', scope: claim.scope, error }));
      // A claim that lands after its request was refused would block the key for a lease: give it back.
      claiming.then((late) => late.claimed && this.store.release(claim)).catch(() => undefined);
      throw new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    });
  }

  /**
   * On a transactional route, the transaction its attempt will run in, opened before the claim and holding the
   * scope, so that a retry takes over at once a claim whose holder died, rather than once its lease lapses.
   * `undefined` in standard mode, and when the store allows no more transactions now: the claim then goes on without
   * one (its answer never waits for a slot), and the transaction is opened after it, falling back to the lease.
   */
  private openHolder(scope: IdempotencyScope, policy: IdempotencyPolicy): Promise<StoreTransaction | undefined> {
    if (!policy.transactional) return Promise.resolve(undefined);
    return this.opened(this.store.beginHoldingTransaction(scope), scope, policy);
  }

  /** Opens the route's transaction if it has none yet, and keeps the lease alive while the handler runs. */
  private async startRun(
    claim: IdempotencyClaim,
    takeover: boolean,
    policy: IdempotencyPolicy,
    holder: StoreTransaction | undefined,
  ): Promise<IdempotencyRun> {
    let run = new IdempotencyRun(claim, takeover, holder);
    if (policy.transactional && !holder) {
      const opening = this.store.beginTransaction(policy.storeTimeoutSeconds * 1000);
      const transaction = await this.opened(opening, claim.scope, policy).catch(async (error: unknown) => {
        await this.claims.release(claim, policy);
        throw error;
      });
      run = new IdempotencyRun(claim, takeover, transaction);
    }
    this.leases.start(run, policy);
    return run;
  }

  /**
   * A transaction being opened, within `storeTimeoutSeconds`; past it, or when it fails, the request is refused with
   * 503 (and one that opens late is rolled back).
   */
  private async opened<T extends StoreTransaction | undefined>(
    opening: Promise<T>,
    scope: IdempotencyScope,
    policy: IdempotencyPolicy,
  ): Promise<T> {
    try {
      return await withTimeout(opening, policy, 'beginning a transaction');
    } catch (error) {
      opening.then((late) => late?.rollback()).catch(() => undefined);
      this.logger.error(
        `Opening the transaction of ${describeScope(scope)} failed (the store is unavailable): ${error}`,
      );
      publishIdempotencyEvent('storeUnavailable', () => ({ operation: 'beginTransaction', scope, error }));
      throw new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
    }
  }
}

/**
 * The scope an operation is claimed under, `(account, "operation <name>", key)`. Its parts follow the HTTP edge's
 * rules, so that what the database would refuse (a key too long for its column, a NUL character) is refused here,
 * for good, rather than failing each claim as if the database were down, which a retrying job would retry for ever.
 */
function scopeOfOperation({ name, key, account }: IdempotentOperation): IdempotencyScope {
  checkOperationPart('name', name, scopeTextFault);
  checkOperationPart('key', key, keyFault);
  if (account !== undefined) checkOperationPart('account', account, scopeTextFault);
  return { account: account ?? '', endpoint: `operation ${name}`, key };
}

function checkOperationPart(
  field: IdempotencyOperationInvalidError['field'],
  value: unknown,
  faultOf: (text: string) => string | undefined,
): void {
  const fault = typeof value === 'string' ? faultOf(value) : `it is ${describedValue(value)}, not a string`;
  if (fault !== undefined) throw new IdempotencyOperationInvalidError(field, fault);
}

/** The replay of a stored outcome; a withheld one's stand-in is refused as the first call was. */
function replayOf(response: StoredResponse, from: 'memory' | 'store'): IdempotencyDecision {
  if (isWithheldOutcome(response)) throw new IdempotencyOutcomeWithheldError();
  return { action: 'replay', response, from };
}

/** What a decision counts as on `idempotency.outcomes`. */
function outcomeOf(decision: IdempotencyDecision): IdempotencyOutcome {
  if (decision.action === 'replay') return decision.from === 'memory' ? 'replay.memory' : 'replay.store';
  return decision.run.takeover ? 'takeover' : 'new';
}

/** What a refusal counts as on `idempotency.outcomes`; `undefined` for an error that is not one of the protocol's. */
function refusalOutcome(error: unknown): IdempotencyOutcome | undefined {
  if (error instanceof IdempotencyKeyReuseError) return 'key_reuse';
  if (error instanceof RequestInProgressError) return 'in_progress';
  if (error instanceof IdempotencyShuttingDownError) return 'shutting_down';
  if (error instanceof IdempotencyStoreUnavailableError) return 'store_unavailable';
  if (error instanceof IdempotencyRecordUnreadableError) return 'record_unreadable';
  if (error instanceof IdempotencyOutcomeWithheldError) return 'outcome_withheld';
  return undefined;
}

function parseResult<T>(response: StoredResponse): JsonResult<T> {
  return JSON.parse(response.body.toString('utf8')) as JsonResult<T>;
}
