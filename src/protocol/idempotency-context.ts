import { Injectable } from '@nestjs/common';
import { currentRun } from './current-run.js';
import type { IdempotencyRun } from './idempotency-run.js';

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
}
