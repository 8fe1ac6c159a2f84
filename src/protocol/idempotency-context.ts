import { Injectable } from '@nestjs/common';
import { currentRun } from './current-run.js';
import type { IdempotencyRun } from './idempotency-run.js';
import { IdempotencyStepError } from './idempotency-step.error.js';
import type { JsonResult } from './jsonified.js';
import type { IdempotencyStep, StepOptions } from './idempotency-step.js';

/**
 * What the code running inside an idempotent handler can know of its operation, anywhere down the call
 * chain (services included), without passing it along: the key, the scope, whether this run took over a
 * lapsed attempt, its store transaction on a transactional route, and keys derived for downstream calls.
 * A store may offer more (`PostgresIdempotencyContext`: the transaction's entity manager and repositories).
 */
@Injectable()
export class IdempotencyContext {
  /** The current run, or `undefined` outside an idempotent handler (or when it runs without a key). */
  get run(): IdempotencyRun | undefined {
    return currentRun();
  }

  /** `IdempotencyRun.deriveKey` of the current run; throws outside one, where no stable key exists. */
  deriveKey(purpose: string): string {
    const run = this.run;
    if (!run) throw new Error(`deriveKey('${purpose}') was called outside an idempotent operation`);
    return run.deriveKey(purpose);
  }

  /**
   * `IdempotencyRun.step` of the current run: `work` runs once across the operation's attempts. Refused outside an
   * idempotent operation (or one run without a key), where no recovery point can be kept.
   */
  step<T>(name: string, work: (step: IdempotencyStep) => Promise<T>, options?: StepOptions): Promise<JsonResult<T>> {
    const run = this.run;
    if (!run) {
      return Promise.reject(
        new IdempotencyStepError(
          'outside_run',
          `Step ${JSON.stringify(name)} was called outside an idempotent operation (no handler, consumer or execute() ` +
            'with a key runs it), where nothing can keep its recovery point.',
        ),
      );
    }
    return run.step(name, work, options);
  }
}
