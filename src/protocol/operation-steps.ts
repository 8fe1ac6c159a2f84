import type { JsonResult } from './jsonified.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type { StoredStep } from './idempotency-store.interface.js';
import { IdempotencyStepError } from './idempotency-step.error.js';
import { MAX_STEP_RESULTS_BYTES, type StepRecording } from './step-recording.js';
import type { IdempotencyStep, StepOptions, StepsOfRun } from './idempotency-step.js';
import { describeScope } from './store-bounds.js';
import { scopeTextFault } from './scope-values.js';

/** Longest step name, in characters: a name is an identifier of code, not data. */
const MAX_NAME_LENGTH = 200;
/**
 * Most steps of one operation: each is stored with its record and read back by every later attempt, so steps are an
 * operation's few phases, not the items of a batch.
 */
export const MAX_STEPS = 100;

/**
 * The steps of one attempt at an operation: those earlier attempts recorded (its recovery point) are skipped in their
 * order, their results returned as stored; the rest run one after another, each recorded once it has finished. A
 * step list that no longer matches the recorded one is refused, never guessed at.
 */
export class OperationSteps implements StepsOfRun<IdempotencyRun> {
  /** How many steps this attempt has passed, skipped or run: the position of the next one. */
  private passed = 0;
  private readonly names = new Set<string>();
  private running: string | undefined;
  /** Once its attempt has ended, a step has nothing to record into: refused before its work runs. */
  private ended = false;
  /** The bytes of the results recorded so far (as stored), against `MAX_STEP_RESULTS_BYTES`. */
  private resultBytes: number;

  constructor(
    /** The steps earlier attempts recorded, in order. */
    private readonly recorded: readonly StoredStep[],
    private readonly recording: StepRecording,
    private readonly policy: IdempotencyPolicy,
  ) {
    this.resultBytes = recorded.reduce((sum, step) => sum + Buffer.byteLength(step.result), 0);
  }

  async run<T>(
    run: IdempotencyRun,
    name: string,
    work: (step: IdempotencyStep) => Promise<T>,
    options: StepOptions,
  ): Promise<JsonResult<T>> {
    checkStepName(name);
    const where = `of ${describeScope(run.scope)}`;
    if (this.ended) {
      throw new IdempotencyStepError(
        'run_ended',
        `Step ${JSON.stringify(name)} ${where} began after its attempt ended (a step left running, or started from a ` +
          'callback after the handler answered): nothing could record it. Await every step inside the operation.',
      );
    }
    if (this.running !== undefined) {
      throw new IdempotencyStepError(
        'overlapping',
        `Step ${JSON.stringify(name)} ${where} began while step ${JSON.stringify(this.running)} was running: run ` +
          'the steps of an operation one after another (await each), never in parallel nor one inside another.',
      );
    }
    if (this.names.has(name)) {
      throw new IdempotencyStepError(
        'name_reused',
        `Step ${JSON.stringify(name)} ${where} ran twice in one attempt: give each step a name of its own, the same ` +
          'in every attempt (a step in a loop names its item, e.g. `receipt:${item.id}`).',
      );
    }
    const position = this.passed;
    if (position >= MAX_STEPS) {
      throw new IdempotencyStepError(
        'too_many_steps',
        `Step ${JSON.stringify(name)} ${where} would be step ${position + 1}, past the ${MAX_STEPS} an operation may ` +
          'have: steps are its phases, not the items of a batch (one step may handle many items).',
      );
    }
    const recorded = this.recorded[position];
    if (recorded !== undefined) {
      if (recorded.name !== name) throw this.changed(run, position, name);
      this.names.add(name);
      this.passed += 1;
      return JSON.parse(this.recording.opened(run, recorded)) as JsonResult<T>;
    }
    this.running = name;
    try {
      const budget = MAX_STEP_RESULTS_BYTES - this.resultBytes;
      const json = await this.recording.run(run, name, work, options, this.policy, budget);
      this.resultBytes += Buffer.byteLength(json);
      this.names.add(name);
      this.passed += 1;
      return JSON.parse(json) as JsonResult<T>;
    } finally {
      this.running = undefined;
    }
  }

  /**
   * The names of the operation's steps recorded so far, in order: by earlier attempts, then by this one (none in a
   * transactional operation, whose steps commit with its outcome).
   */
  get recordedNames(): string[] {
    const earlier = this.recorded.map(({ name }) => name);
    return this.policy.transactional ? earlier : [...earlier, ...[...this.names].slice(earlier.length)];
  }

  /** Refuses steps from now on: the attempt has ended. */
  end(): void {
    this.ended = true;
  }

  private changed(run: IdempotencyRun, position: number, name: string): IdempotencyStepError {
    const list = this.recorded.map((step) => JSON.stringify(step.name)).join(', ');
    return new IdempotencyStepError(
      'steps_changed',
      `Step ${position + 1} of ${describeScope(run.scope)} is ${JSON.stringify(name)} now, and an earlier attempt ` +
        `recorded ${JSON.stringify(this.recorded[position].name)} there (recorded: ${list}): the operation's steps ` +
        "changed between attempts (a deploy, or a step that depends on more than the operation's input). Its " +
        'recovery point is kept: deploy code that runs the recorded steps in their order, or, once what they did is ' +
        'known, release the key with the operator.',
    );
  }
}

/** A name the stores keep as it is (no NUL, no lone surrogate), short enough to be code's, not data. */
function checkStepName(name: unknown): void {
  const fault =
    typeof name !== 'string'
      ? `it is ${typeof name}, not a string`
      : name.length > MAX_NAME_LENGTH
        ? `it is longer than ${MAX_NAME_LENGTH} characters`
        : scopeTextFault(name);
  if (fault !== undefined) {
    throw new IdempotencyStepError(
      'invalid_name',
      `A step's name must be text of 1 to ${MAX_NAME_LENGTH} characters, the same in every attempt: ${fault}.`,
    );
  }
}
