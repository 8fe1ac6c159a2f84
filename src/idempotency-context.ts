import { AsyncLocalStorage } from 'node:async_hooks';
import { Injectable } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import type { IdempotencyRun } from './idempotency-run.js';

const runs = new AsyncLocalStorage<IdempotencyRun>();

/**
 * What the code running inside an idempotent handler can know of its operation, anywhere down the call
 * chain (services included), without passing it along: the key, the scope, whether this run took over a
 * lapsed attempt, the transaction of a transactional route, and keys derived for downstream calls.
 */
@Injectable()
export class IdempotencyContext {
  /** Runs `work` as part of `run`; the interceptor and `IdempotencyService` do this for handlers. */
  static runWithin<T>(run: IdempotencyRun, work: () => T): T {
    return runs.run(run, work);
  }

  /** The current run, or `undefined` outside an idempotent handler (or when it runs without a key). */
  get run(): IdempotencyRun | undefined {
    return runs.getStore();
  }

  /** The transaction's entity manager inside a transactional handler; `undefined` elsewhere. */
  get manager(): EntityManager | undefined {
    return this.run?.manager;
  }

  /** `IdempotencyRun.deriveKey` of the current run; throws outside one, where no stable key exists. */
  deriveKey(purpose: string): string {
    const run = this.run;
    if (!run) throw new Error(`deriveKey('${purpose}') was called outside an idempotent operation`);
    return run.deriveKey(purpose);
  }
}
