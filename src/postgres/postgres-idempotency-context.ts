import { Inject, Injectable } from '@nestjs/common';
import type { DataSource, EntityManager, EntityTarget, ObjectLiteral, Repository } from 'typeorm';
import { IdempotencyContext } from '../protocol/idempotency-context.js';
import { IDEMPOTENCY_DATA_SOURCE } from './postgres.tokens.js';
import { entityManagerOf } from './run-transaction.js';

/**
 * `IdempotencyContext` on the PostgreSQL store, with what a transactional handler writes through: the entity manager
 * and repositories of its run's transaction, so that its writes commit with the stored outcome.
 */
@Injectable()
export class PostgresIdempotencyContext extends IdempotencyContext {
  constructor(@Inject(IDEMPOTENCY_DATA_SOURCE) private readonly dataSource: DataSource) {
    super();
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
}
