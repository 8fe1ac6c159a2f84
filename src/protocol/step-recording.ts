import type { Logger } from '@nestjs/common';
import { IdempotencyRecordUnreadableError, IdempotencyStoreUnavailableError } from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type { IdempotencyStore, StoredStep, StoreTransaction } from './idempotency-store.interface.js';
import { IdempotencyStepError, stepRefusal } from './idempotency-step.error.js';
import { publishIdempotencyEvent } from './idempotency-events.js';
import type { IdempotencyStep, StepOptions } from './idempotency-step.js';
import { EnvelopeUnreadableError } from './outcome-envelope.js';
import type { OutcomeSealing } from './outcome-sealing.js';
import { describeScope, withTimeout } from './store-bounds.js';
import { runWithin } from './current-run.js';

type RecordStep = NonNullable<IdempotencyStore['recordStep']>;

/**
 * The store's side of steps: a step's work run (in a transaction of its own when it asks), its result recorded,
 * sealed, fenced on its attempt and bounded by `storeTimeoutSeconds`; a recorded result opened again.
 */
export class StepRecording {
  constructor(
    private readonly store: IdempotencyStore,
    private readonly logger: Logger,
    private readonly sealing: OutcomeSealing,
  ) {}

  /** Runs a step's work and records its result; resolves with that result's JSON text. */
  async run<T>(
    run: IdempotencyRun,
    name: string,
    work: (step: IdempotencyStep) => Promise<T>,
    options: StepOptions,
    policy: IdempotencyPolicy,
    /** How many bytes of JSON its result may have: what the operation's earlier results left. */
    budgetBytes: number,
  ): Promise<string> {
    const recordStep = this.checkSupported(run, name, options);
    const step: IdempotencyStep = { name, key: run.deriveKey(`step ${name}`) };
    // A transactional operation's steps would commit with its outcome or roll back with it: recording them would gain
    // nothing, and would hold its record's row locked until then, in the way of its lease's renewals.
    if (run.transaction) return resultJson(run, name, await work(step), budgetBytes);
    if (!options.transactional) {
      const json = resultJson(run, name, await work(step), budgetBytes);
      await this.record(recordStep, run, name, json, policy);
      return json;
    }
    const transaction = await this.begin(run, policy);
    try {
      const json = resultJson(
        run,
        name,
        await runWithin(run.inStepTransaction(transaction), () => work(step)),
        budgetBytes,
      );
      await this.record(recordStep, run, name, json, policy, transaction);
      // A commit that fails or does not answer leaves the step recorded with its rows or neither: the retry finds out.
      await withTimeout(transaction.commit(), policy, 'committing a step').catch((error: unknown) => {
        throw this.unavailable(run, 'commit', error, policy);
      });
      return json;
    } catch (error) {
      // A statement of the step's that did not answer (its recovery point, its commit) still runs on the transaction's
      // connection: the connection is cut, rather than a rollback queued behind that statement.
      if (error instanceof IdempotencyStoreUnavailableError) transaction.abandon();
      await discard(transaction, policy);
      throw error;
    }
  }

  /** A recorded step's result, as its work returned it (JSON text). */
  opened(run: IdempotencyRun, step: StoredStep): string {
    try {
      if (typeof step.result !== 'string') throw new EnvelopeUnreadableError('it is not text (altered)');
      return this.sealing.openStep(run.scope, step.name, step.result);
    } catch (error) {
      if (!(error instanceof EnvelopeUnreadableError)) throw error;
      this.logger.error(
        `The recorded result of step ${JSON.stringify(step.name)} of ${describeScope(run.scope)} cannot be read: ` +
          `${error.reason}. The operation is refused, not run again from there: put the key that sealed it back in ` +
          'encryption.keys (or set encryption.acceptPlaintext during a switch-over).',
      );
      publishIdempotencyEvent('recordUnreadable', () => ({ scope: run.scope, reason: error.reason }));
      throw stepRefusal(new IdempotencyRecordUnreadableError());
    }
  }

  /** The store's `recordStep`, refusing what the store cannot do. */
  private checkSupported(run: IdempotencyRun, name: string, options: StepOptions): RecordStep {
    const what = `Step ${JSON.stringify(name)} of ${describeScope(run.scope)}`;
    const recordStep = this.store.recordStep?.bind(this.store);
    if (!recordStep) {
      throw new IdempotencyStepError(
        'unsupported',
        `${what} cannot be recorded: the idempotency store records no steps (it has no recordStep). Use a store ` +
          'that does (each of the package does), or run the operation without steps.',
      );
    }
    if (options.transactional && !run.transaction && this.store.transactionsRefused !== undefined) {
      throw new IdempotencyStepError(
        'unsupported',
        `${what} is transactional, and the idempotency store runs no transaction: ${this.store.transactionsRefused}.`,
      );
    }
    return recordStep;
  }

  private async begin(run: IdempotencyRun, policy: IdempotencyPolicy): Promise<StoreTransaction> {
    const opening = this.store.beginTransaction(policy.storeTimeoutSeconds * 1000);
    try {
      return await withTimeout(opening, policy, 'beginning the transaction of a step');
    } catch (error) {
      opening.then((late) => late.rollback()).catch(() => undefined);
      throw this.unavailable(run, 'beginTransaction', error, policy);
    }
  }

  /** Records the step, fenced on the run's attempt: refused once another attempt holds the key. */
  private async record(
    recordStep: RecordStep,
    run: IdempotencyRun,
    name: string,
    json: string,
    policy: IdempotencyPolicy,
    transaction?: StoreTransaction,
  ): Promise<void> {
    const step = { name, result: this.sealing.sealStep(run.scope, name, json) };
    let recorded: boolean;
    try {
      recorded = await withTimeout(recordStep(run.claim, step, transaction), policy, 'recording a step');
    } catch (error) {
      throw this.unavailable(run, 'recordStep', error, policy);
    }
    if (!recorded) {
      throw new IdempotencyStepError(
        'claim_lost',
        `Step ${JSON.stringify(name)} of ${describeScope(run.scope)} finished after its attempt no longer held the ` +
          'key (its lease lapsed and another attempt took it over, shutdown released it, or the attempt ended while ' +
          `the step, not awaited, still ran): its recovery point is not recorded${transaction ? ' and its writes are rolled back' : ''}.`,
      );
    }
  }

  private unavailable(
    run: IdempotencyRun,
    operation: string,
    error: unknown,
    policy: IdempotencyPolicy,
  ): IdempotencyStoreUnavailableError {
    this.logger.error(
      `A step of ${describeScope(run.scope)} failed: ${operation} (the store is unavailable): ${error}`,
    );
    publishIdempotencyEvent('storeUnavailable', () => ({ operation, scope: run.scope, error }));
    return stepRefusal(new IdempotencyStoreUnavailableError(policy.retryAfterSeconds));
  }
}

/**
 * The most bytes of an operation's step results together, as JSON: every later attempt at the operation reads them
 * all back, and a store holds them in its record (as one value, which a single-threaded store copies whole).
 */
export const MAX_STEP_RESULTS_BYTES = 1024 * 1024;

/**
 * A step's result as stored: its JSON (`null` for nothing, or for what JSON has no value for: a function, a symbol),
 * parsed back by every attempt, the first included. One JSON cannot hold (a BigInt, a cycle), or too large to keep,
 * is refused, naming the step: its work ran, and a retry runs it again.
 */
function resultJson(run: IdempotencyRun, name: string, value: unknown, budgetBytes: number): string {
  const what = `Step ${JSON.stringify(name)} of ${describeScope(run.scope)}`;
  let json: string | undefined;
  try {
    json = JSON.stringify(value ?? null);
  } catch (error) {
    throw new IdempotencyStepError(
      'unserializable',
      `${what} returned a value JSON cannot hold (${error}): its work ran, and its result is not recorded, so a ` +
        'retry runs it again. Return plain data (ids, strings, numbers as numbers or strings).',
    );
  }
  json ??= 'null';
  if (Buffer.byteLength(json) > budgetBytes) {
    throw new IdempotencyStepError(
      'result_too_large',
      `${what} returned ${Buffer.byteLength(json)} bytes of JSON, more than the ${budgetBytes} its operation's steps ` +
        `have left of ${MAX_STEP_RESULTS_BYTES} together: its work ran, and its result is not recorded, so a retry ` +
        'runs it again. Return ids, not whole documents.',
    );
  }
  return json;
}

/** Rolls a step's transaction back within `storeTimeoutSeconds`, past which its connection is cut. */
async function discard(transaction: StoreTransaction, policy: IdempotencyPolicy): Promise<void> {
  await withTimeout(transaction.rollback(), policy, 'rolling back a step').catch(() => {
    transaction.abandon();
    return transaction.rollback().catch(() => undefined);
  });
}
