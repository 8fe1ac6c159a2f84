import { Inject, Injectable } from '@nestjs/common';
import type { DataSource, EntityManager, EntityTarget, ObjectLiteral, Repository } from 'typeorm';
import { IDEMPOTENCY_DATA_SOURCE } from './postgres/postgres.tokens.js';
import { entityManagerOf } from './postgres/run-transaction.js';
import { currentRun, runWithin } from './protocol/current-run.js';
import type { IdempotencyRun } from './protocol/idempotency-run.js';

/**
 * What the code running inside an idempotent handler can know of its operation, anywhere down the call
 * chain (services included), without passing it along: the key, the scope, whether this run took over a
 * lapsed attempt, the transaction of a transactional route, and keys derived for downstream calls.
 */
@Injectable()
export class IdempotencyContext {
  constructor(@Inject(IDEMPOTENCY_DATA_SOURCE) private readonly dataSource: DataSource) {}

  /** Runs `work` as part of `run`; the interceptor and `IdempotencyService` do this for handlers. */
  static runWithin<T>(run: IdempotencyRun, work: () => T): T {
    return runWithin(run, work);
  }

  /** The current run, or `undefined` outside an idempotent handler (or when it runs without a key). */
  get run(): IdempotencyRun | undefined {
    return currentRun();
  }

  /** The transaction's entity manager inside a transactional handler; `undefined` elsewhere. */
  get manager(): EntityManager | undefined {
    return entityManagerOf(this.run);
  }

  /**
   * The repository of `entity` for the code running now: inside a transactional handler, the transaction's (its
   * writes commit with the stored outcome); elsewhere, the one of the module's data source.
   */
  getRepository<Entity extends ObjectLiteral>(entity: EntityTarget<Entity>): Repository<Entity> {
    return (this.manager ?? this.dataSource.manager).getRepository(entity);
  }

  /** `IdempotencyRun.deriveKey` of the current run; throws outside one, where no stable key exists. */
  deriveKey(purpose: string): string {
    const run = this.run;
    if (!run) throw new Error(`deriveKey('${purpose}') was called outside an idempotent operation`);
    return run.deriveKey(purpose);
  }
}
