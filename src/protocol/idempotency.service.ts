import { randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { KeyTerms } from './idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './idempotency.tokens.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';
import {
  checkTenancy,
  type IdempotencyPolicy,
  resolvePolicy,
  resolvePurgeSettings,
  resolveReplayCacheLimits,
  resolveShutdownTimeout,
} from './idempotency-policy.js';
import { currentRun } from './current-run.js';
import type { ProtocolModuleOptions, ProtocolIdempotentOptions } from './idempotency-options.interface.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type {
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
} from './idempotency-store.interface.js';
import { ReplayCache } from './replay-cache.js';
import { ExpiredRecordsPurge } from './expired-records-purge.js';
import { ClaimEnding } from './claim-ending.js';
import { AttemptLifecycle } from './attempt-lifecycle.js';
import { ClaimDecision, type IdempotencyDecision } from './claim-decision.js';
import { type DrainParticipant, RunningAttempts } from './running-attempts.js';
import { OutcomeSealing } from './outcome-sealing.js';
import { StepRecording } from './step-recording.js';
import { IdempotencyTelemetry, type IdempotencyOutcome } from './idempotency-telemetry.js';
import { timedStore } from './timed-store.js';
import {
  type ExecuteResult,
  type IdempotentOperation,
  operationFingerprint,
  operationTerms,
  resultOf,
  scopeOfOperation,
  storedResult,
} from './idempotent-operations.js';

/**
 * The protocol's public face, independent of any transport: `begin()`, which transports call through the
 * interceptor, `execute()` for operations that are not calls of a transport, the purge, and shutdown's drain. The
 * decision (`ClaimDecision`), the attempts' lifecycle (`AttemptLifecycle`) and the end of a claim (`ClaimEnding`)
 * each live in a file of their own.
 */
@Injectable()
export class IdempotencyService {
  private readonly logger = new Logger('Idempotency');
  /** The module's options resolved (and checked, so that invalid ones refuse the start): `execute()`'s base. */
  private readonly modulePolicy: IdempotencyPolicy;
  private readonly purge: ExpiredRecordsPurge;
  private readonly replays: ReplayCache;
  /** The attempts between their claim and their end, and the shutdown's drain of them. */
  private readonly lifecycle: AttemptLifecycle;
  /** The attempts running now, and whether the drain has begun (which the decision and the lifecycle share). */
  private readonly running: RunningAttempts;
  private readonly decisions: ClaimDecision;
  /** The module's metrics and spans (no-ops without an OpenTelemetry SDK). */
  private readonly telemetry = new IdempotencyTelemetry();
  /** The store, each operation timed when a meter provider is registered. */
  private readonly store: IdempotencyStore;

  constructor(
    @Inject(IDEMPOTENCY_STORE) store: IdempotencyStore,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: ProtocolModuleOptions,
  ) {
    store = this.store = this.telemetry.metered ? timedStore(store, this.telemetry) : store;
    this.modulePolicy = resolvePolicy(options);
    checkTenancy(options);
    this.purge = new ExpiredRecordsPurge(store, resolvePurgeSettings(options).batchSize);
    this.replays = new ReplayCache(resolveReplayCacheLimits(options));
    const sealing = OutcomeSealing.from(options.encryption);
    const claims = new ClaimEnding(store, this.logger, sealing, this.telemetry, (run, response, policy) =>
      this.rememberOutcome(run, response, policy),
    );
    this.running = new RunningAttempts(this.logger, resolveShutdownTimeout(options));
    const steps = new StepRecording(store, this.logger, sealing);
    this.lifecycle = new AttemptLifecycle(store, this.logger, claims, this.telemetry, this.running, steps);
    this.decisions = new ClaimDecision(
      store,
      this.logger,
      this.replays,
      sealing,
      this.lifecycle,
      this.running,
      this.telemetry,
    );
  }

  /**
   * Graceful shutdown's drain: new claims are refused (503 + `Retry-After`), running attempts get up to
   * `shutdownTimeoutSeconds` to finish and store their outcomes, and those still running then are ended: their claims
   * released (transactional: their writes rolled back by cutting their connections) and their clients answered 503,
   * so that a retry runs on another instance. It runs once: later calls await the same drain. It must end before the
   * application's providers are destroyed, which running work still uses: a transport whose server closes with the
   * application begins it before that (see its room), and an application context calls it itself.
   */
  drain(): Promise<void> {
    return this.lifecycle.drain();
  }

  /** Whether shutdown's drain has begun: new claims are refused (but those of work in hand), the instance is going. */
  get shuttingDown(): boolean {
    return this.running.drainBegun;
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
    this.running.addParticipant(participant);
  }

  /**
   * One lookup, four outcomes (`ClaimDecision`): a new key is claimed (run the work, as the attempt handed out); a
   * key used with a different request
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
    const claim: IdempotencyClaim = { scope, attempt: randomUUID() };
    const endpoint = call.endpointLabel ?? scope.endpoint;
    return this.telemetry.measureClaim(claim, { transport, endpoint }, async (attributes) => {
      const decision = await this.decisions.decide(claim, fingerprint, policy, { terms, inHand }, attributes);
      const run = decision.action === 'run' ? decision.attempt.run : undefined;
      return { decision, outcome: outcomeOf(decision), run };
    });
  }

  /** Caches an outcome this process stored. Its record expires `ttlSeconds` after its store, itself after the claim. */
  private rememberOutcome(run: IdempotencyRun, response: StoredResponse, policy: IdempotencyPolicy): void {
    const claimed = this.running.get(run);
    if (claimed)
      this.replays.remember(
        run.scope,
        { fingerprint: claimed.fingerprint, response },
        policy.ttlSeconds,
        claimed.since,
      );
  }

  /**
   * Runs `work` once per operation key, for callers that no transport serves (a job, a script, a step
   * of a workflow), with the same claim, fingerprint comparison, lease, TTL and (with `transactional: true`)
   * transaction as a transport's calls:
   * a completed operation returns its stored result; one still running throws `IdempotencyRequestInProgressError`;
   * the same key with another input throws `IdempotencyKeyReuseError`; a name, key or account a transport would
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
    if (policy.transactional && this.store.transactionsRefused !== undefined) {
      throw new IdempotencySetupError(
        `execute() of ${JSON.stringify(operation.name)} is transactional, and the idempotency store runs no ` +
          `transactional operation: ${this.store.transactionsRefused}.`,
      );
    }
    const scope = scopeOfOperation(operation);
    const fingerprint = operationFingerprint(operation.input); // before anything is claimed
    // Within an attempt of work in hand (a consumer's message), the operation is in hand too: run during the drain.
    const within = currentRun();
    const inHand = (within && this.running.get(within)?.inHand) ?? false;
    const { response, replayed } = await this.runOnce(
      scope,
      fingerprint,
      policy,
      { terms: operationTerms(operation.name), inHand },
      async (run) => storedResult(await work(run)),
    );
    return { result: resultOf<T>(response), replayed };
  }

  /**
   * Claims `scope` and runs `work` within the attempt, unless the scope is completed already (its stored outcome is
   * returned, `replayed`): what `work` answers is stored as the outcome; a failing `work` releases the claim (a record
   * with steps is kept for the next attempt) and its error is rethrown. A claim refused (in progress, another input,
   * shutting down, the store unavailable) throws its refusal. What `execute()` and the completer share.
   */
  async runOnce(
    scope: IdempotencyScope,
    fingerprint: string,
    policy: IdempotencyPolicy,
    call: { terms: KeyTerms; inHand?: boolean; transport?: string },
    work: (run: IdempotencyRun) => Promise<StoredResponse>,
  ): Promise<{ response: StoredResponse; replayed: boolean }> {
    const { terms, ...described } = call;
    const decision = await this.begin(scope, fingerprint, policy, terms, described);
    if (decision.action === 'replay') return { response: decision.response, replayed: true };

    const { attempt } = decision;
    let response: StoredResponse;
    try {
      response = await attempt.within(() => work(attempt.run));
    } catch (error) {
      await attempt.end({ response: undefined, failed: true, final: false });
      throw error;
    }
    const refusal = await attempt.end({ response, failed: false, final: true });
    if (refusal) throw refusal;
    return { response, replayed: false };
  }

  /**
   * Deletes every expired record, one bounded batch (default `purgeBatchSize`) per statement; returns how many it
   * deleted. For a purge of your own, with `purgeIntervalSeconds: false`.
   */
  purgeExpired(batchSize?: number): Promise<number> {
    return this.purge.purge(batchSize);
  }
}

/** What a decision counts as on `idempotency.outcomes`. */
function outcomeOf(decision: IdempotencyDecision): IdempotencyOutcome {
  if (decision.action === 'replay') return decision.from === 'memory' ? 'replay.memory' : 'replay.store';
  return decision.attempt.run.takeover ? 'takeover' : 'new';
}
