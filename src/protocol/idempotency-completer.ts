import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import {
  IdempotencyKeyReuseError,
  IdempotencyRequestInProgressError,
  IdempotencyShuttingDownError,
} from './idempotency.errors.js';
import type {
  CompleterOptions,
  ProtocolIdempotentOptions,
  ProtocolModuleOptions,
} from './idempotency-options.interface.js';
import { type IdempotencyPolicy, resolveCompleterSettings, resolvePolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';
import type {
  AbandonedQuery,
  AbandonedRecord,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
} from './idempotency-store.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './idempotency.tokens.js';
import { IdempotencyService } from './idempotency.service.js';
import { operationEndpoint, storedResult } from './idempotent-operations.js';
import { publishIdempotencyEvent } from './idempotency-events.js';
import { describedValue } from './described-value.js';
import { describeScope, within, withTimeout } from './store-bounds.js';

/** An operation the completer claimed again, as its completion gets it. */
export interface AbandonedOperation {
  /** Whose and which: the account, the endpoint (`operation <name>` for `execute()`'s) and the key. */
  scope: IdempotencyScope;
  /**
   * The names of the steps earlier attempts recorded, in order, as its claim found them: `run.step()` returns their
   * results without running them.
   */
  steps: string[];
  /** This attempt's number among those that claimed the operation (the first client's was 1). */
  attempt: number;
  /** The completer's attempt: its steps resume the operation, as a retry's would. */
  run: IdempotencyRun;
}

/** What a completion stores, as the operation's outcome: replayed to every later call of its key. */
export interface CompletedOutcome {
  /** The status a replay answers, as a transport's would (a route's `201`, say). Default: 200. */
  status?: number;
  /** The body, stored as JSON. Default: `null`. */
  body?: unknown;
  /** Headers a replay sends, over `content-type: application/json`. Default: none. */
  headers?: Record<string, string>;
}

/**
 * Finishes an abandoned operation, with the work its handler would have done from where its steps stand, and answers
 * its outcome; throwing leaves the operation for a later attempt (its recovery point where it was).
 */
export type OperationCompletion = (operation: AbandonedOperation) => Promise<CompletedOutcome>;

/** What one look for abandoned operations did (`completeAbandoned()`). */
export interface CompletionPass {
  /** Claimed and completed: their outcome is stored. */
  completed: number;
  /** Claimed, and their completion failed: left for a later attempt. */
  failed: number;
  /** Failed on their last attempt (`maxAttempts`): left in progress for an operator. */
  gaveUp: number;
  /**
   * Found, and not run: claimed meanwhile by another attempt (a client's retry, another instance's completer),
   * completed, released or expired with its steps (its claim released at once), or the application shutting down.
   */
  skipped: number;
}

interface Registration {
  completion: OperationCompletion;
  policy: IdempotencyPolicy;
}

/**
 * The completer: operations registered with it (an `execute()` job's, a route's, a consumer's) whose attempt was
 * abandoned (its process died, or it failed after recording a step, and no retry came) are claimed again after a
 * backoff, like any attempt (the same fingerprint, a lease, fencing), and finished by their completion, so that the
 * work completes even when the client never retries. Bounded: one operation at a time, `batchSize` per look, and
 * `maxAttempts` per operation, after which it is left for an operator.
 */
@Injectable()
export class IdempotencyCompleter implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('IdempotencyCompleter');
  private readonly settings: Required<CompleterOptions>;
  /** The module's options resolved: the bound of the store's search (`storeTimeoutSeconds`). */
  private readonly modulePolicy: IdempotencyPolicy;
  private readonly completions = new Map<string, Registration>();
  private timer?: NodeJS.Timeout;
  /** The look under way, which the next tick does not overlap. */
  private looking?: Promise<CompletionPass>;

  constructor(
    @Inject(IDEMPOTENCY_STORE) private readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) private readonly options: ProtocolModuleOptions,
    private readonly idempotency: IdempotencyService,
  ) {
    this.settings = resolveCompleterSettings(options);
    this.modulePolicy = resolvePolicy(options);
  }

  /**
   * Registers how the abandoned operations of `endpoint` (a route's method and path, `POST /v1/charges`; a consumer's
   * transport, pattern and handler, `<transport> payout.requested PayoutsConsumer.pay`; an `execute()` operation's
   * `operation <name>`, which `registerOperation` names for you) are finished. `options` are the route's or handler's
   * own, where they differ from the module's (its lease, its TTL, `transactional`). Call it at start-up
   * (`onModuleInit`); a store that cannot find abandoned records refuses it.
   */
  register(endpoint: string, completion: OperationCompletion, options: ProtocolIdempotentOptions = {}): void {
    if (!this.store.findAbandoned) {
      throw new IdempotencySetupError(
        `IdempotencyCompleter cannot complete ${endpoint}: the idempotency store cannot find abandoned records ` +
          '(it has no findAbandoned). Use a store that can (docs/steps.md, "The completer", names them); on this ' +
          'one, drive the intents your application keeps to completion with execute() yourself.',
      );
    }
    if (this.completions.has(endpoint)) {
      throw new IdempotencySetupError(`IdempotencyCompleter has a completion for ${endpoint} already.`);
    }
    // Never waits on an attempt that holds the operation (`inFlight: 'wait'`): it is that attempt's to finish.
    const policy = resolvePolicy(this.options, { ...options, inFlight: 'conflict' });
    this.completions.set(endpoint, { completion, policy });
  }

  /**
   * Registers how abandoned `execute()` operations named `name` are finished: `completion` does what the operation's
   * work does (it finds the operation's input by its key, as the application persisted it with its intent), and its
   * result is stored as `execute()` stores one.
   */
  registerOperation(
    name: string,
    completion: (operation: AbandonedOperation) => Promise<unknown>,
    options: ProtocolIdempotentOptions = {},
  ): void {
    this.register(operationEndpoint(name), async (operation) => ({ body: await completion(operation) }), options);
  }

  /**
   * Looks once for abandoned operations of the registered endpoints (at most `batchSize`) and claims and completes
   * them one after another; a look already under way is awaited instead. The schedule calls it every
   * `intervalSeconds`; call it yourself with `intervalSeconds: false`.
   */
  completeAbandoned(): Promise<CompletionPass> {
    this.looking ??= this.look().finally(() => (this.looking = undefined));
    return this.looking;
  }

  /**
   * The operations of the registered endpoints that the completer gave up on (claimed `maxAttempts` times, their lease
   * ended), idle longest first: for an operator's view, to see them and release them (or let them expire).
   */
  gaveUp(options: { limit?: number } = {}): Promise<AbandonedRecord[]> {
    if (this.completions.size === 0) return Promise.resolve([]);
    const { maxAttempts } = this.settings;
    return this.findAbandoned({
      endpoints: [...this.completions.keys()],
      minAttempts: maxAttempts,
      backoffSeconds: 0,
      maxBackoffSeconds: 0,
      limit: options.limit ?? 100,
    });
  }

  onApplicationBootstrap(): void {
    const { intervalSeconds } = this.settings;
    if (intervalSeconds === false) return;
    this.timer = setInterval(() => {
      // A look still under way (a slow completion) is left to end: a tick never joins it, so that its failure is
      // logged once.
      if (this.completions.size === 0 || this.idempotency.shuttingDown || this.looking) return;
      this.completeAbandoned().catch((error: unknown) =>
        this.logger.error(`Looking for abandoned operations failed: ${error}`),
      );
    }, intervalSeconds * 1000);
    this.timer.unref();
  }

  /** Stops looking; a completion running now is an attempt, which shutdown's drain waits for or ends. */
  beforeApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /**
   * Finds and claims one operation at a time, up to `batchSize`: what was found is claimed a round trip later, not
   * after the completions of a whole batch, by which time an operator may have released it, another instance failed
   * it (its backoff begun again), or it expired.
   */
  private async look(): Promise<CompletionPass> {
    const pass: CompletionPass = { completed: 0, failed: 0, gaveUp: 0, skipped: 0 };
    if (this.completions.size === 0) return pass;
    const { batchSize, maxAttempts, backoffSeconds, maxBackoffSeconds } = this.settings;
    const query = { endpoints: [...this.completions.keys()], maxAttempts, backoffSeconds, maxBackoffSeconds, limit: 1 };
    const seen = new Set<string>();
    for (let looked = 0; looked < batchSize && !this.idempotency.shuttingDown; looked += 1) {
      const [record] = await this.findAbandoned(query);
      if (!record) break;
      // Found again, unchanged by its claim (a replay answered from memory): the look would find nothing else.
      const scope = JSON.stringify(record.scope);
      if (seen.has(scope)) break;
      seen.add(scope);
      pass[await this.complete(record)] += 1;
    }
    return pass;
  }

  /** The store's search, bounded by `storeTimeoutSeconds` as any store operation. */
  private findAbandoned(query: AbandonedQuery): Promise<AbandonedRecord[]> {
    return withTimeout(this.store.findAbandoned!(query), this.modulePolicy, 'finding abandoned operations');
  }

  /**
   * Claims one abandoned operation again and runs its completion within the claim, for at most `maxHoldSeconds`. A
   * claim refused because another attempt holds the operation now (a client's retry, another instance's completer),
   * or because a new request took its key after it expired, is theirs; one refused as the application shuts down is
   * left; one the store could not answer ends the look. A claim that did not resume the operation found (the record
   * was released or expired meanwhile, and the claim made a new one) is released before anything runs.
   */
  private async complete(record: AbandonedRecord): Promise<keyof CompletionPass> {
    const { scope, fingerprint } = record;
    const { completion, policy } = this.completions.get(scope.endpoint) as Registration;
    const attempt = record.attempts + 1;
    let claimed: IdempotencyRun | undefined;
    try {
      const { replayed } = await this.idempotency.runOnce(
        scope,
        fingerprint,
        policy,
        { terms: { key: `key of ${scope.endpoint}`, usedWith: 'request' }, transport: 'completer' },
        async (run) => {
          claimed = run;
          if (!resumes(run, record.steps)) throw new NotAbandoned();
          // Its steps as claimed: another attempt may have recorded more since the look.
          const steps = [...run.recordedSteps];
          // Past maxHoldSeconds its attempt ends, released: the completion's later steps are refused, and the look
          // goes on (its work is not cancelled; nothing of it is recorded any more).
          const outcome = await within(
            completion({ scope, steps, attempt, run }),
            policy.maxHoldSeconds * 1000,
            () => new Error(`it did not end within maxHoldSeconds (${policy.maxHoldSeconds} s)`),
          );
          return storedOutcome(outcome);
        },
      );
      if (replayed) return 'skipped';
      this.logger.log(`Completed the abandoned ${describeScope(scope)} (attempt ${attempt}).`);
      publishIdempotencyEvent('completion', () => ({ scope, attempt, outcome: 'completed' }));
      return 'completed';
    } catch (error) {
      if (error instanceof NotAbandoned) return 'skipped';
      if (!claimed) {
        if (error instanceof IdempotencyRequestInProgressError || error instanceof IdempotencyKeyReuseError) {
          return 'skipped';
        }
        if (error instanceof IdempotencyShuttingDownError) return 'skipped'; // the look stops at the next one
        throw error;
      }
      return this.failed(scope, attempt, claimed.recordedSteps.length > 0, error);
    }
  }

  /** A completion that failed: left for a later attempt, or, on its last, to an operator. */
  private failed(scope: IdempotencyScope, attempt: number, stepped: boolean, error: unknown): keyof CompletionPass {
    const gaveUp = attempt >= this.settings.maxAttempts && stepped;
    const left = gaveUp
      ? `the completer gives up on it after ${attempt} attempts: it stays in progress until it expires, for an ` +
        'operator to see and release (nest-idempotency stuck, release)'
      : stepped
        ? 'it is left for a later attempt, from its last step'
        : 'it had recorded no step, so its record is released: a retry runs it anew';
    const message = `Completing the abandoned ${describeScope(scope)} failed (${error}); ${left}.`;
    // Cut short by shutdown's drain: the next instance's completer (or a retry) takes it from there.
    if (this.idempotency.shuttingDown) this.logger.log(message);
    else this.logger.warn(message);
    publishIdempotencyEvent('completion', () => ({ scope, attempt, outcome: gaveUp ? 'gave-up' : 'failed', error }));
    return gaveUp ? 'gaveUp' : 'failed';
  }
}

/** Thrown, before a completion runs, by a claim that did not resume the operation found. */
class NotAbandoned extends Error {}

/**
 * Whether the claim took over the record found, at the recovery point found or past it (another attempt may have
 * recorded more since): not a new record (the one found was released, or purged), nor one restarted without its steps
 * (it expired).
 */
function resumes(run: IdempotencyRun, found: string[]): boolean {
  const recorded = run.recordedSteps;
  return run.takeover && found.every((name, position) => recorded[position] === name);
}

/** A header's name: a token (RFC 9110). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** A completion's outcome as the store keeps it: its body as JSON, with its status. */
function storedOutcome({ status = 200, body, headers = {} }: CompletedOutcome): StoredResponse {
  // Refused before the attempt ends, so that the completion fails (and is tried again) rather than its outcome.
  if (!Number.isInteger(status) || status < 100 || status > 599) {
    throw new TypeError(`A completion's status must be an integer from 100 to 599, got ${describedValue(status)}`);
  }
  for (const [name, value] of Object.entries(headers)) {
    // What a replay could not send: every later call of the key would fail.
    if (!HEADER_NAME.test(name) || typeof value !== 'string' || /[\r\n\0]/.test(value)) {
      throw new TypeError(
        `A completion's header ${JSON.stringify(name)} must be a token with a string value of one line, got ` +
          describedValue(value),
      );
    }
  }
  const stored = storedResult(body);
  return { ...stored, status, headers: { ...stored.headers, ...headers } };
}
