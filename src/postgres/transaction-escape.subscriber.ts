import { Logger } from '@nestjs/common';
import type {
  EntityMetadata,
  EntitySubscriberInterface,
  InsertEvent,
  QueryRunner,
  RecoverEvent,
  RemoveEvent,
  SoftRemoveEvent,
  UpdateEvent,
} from 'typeorm';
import type { IdempotencyRun } from '../protocol/idempotency-run.js';
import { openTransactionRunner } from './run-transaction.js';

/** A write made outside the transaction of the transactional run it belongs to, with `onTransactionEscape: 'throw'`. */
export class TransactionEscapeError extends Error {
  override readonly name = 'TransactionEscapeError';
}

/** What TypeORM tells a subscriber of every write it is about to make. */
interface WriteEvent {
  queryRunner: QueryRunner;
  metadata: EntityMetadata;
}

/**
 * Watches the entity writes of a data source: one made during a transactional run, on a connection other than
 * the run's transaction (an injected repository, say), commits on its own whatever the run's outcome, so that a
 * retry after a rollback writes it again. Only writes TypeORM announces are seen: raw SQL (`query()`) is not.
 */
export class TransactionEscapeSubscriber implements EntitySubscriberInterface {
  private readonly logger = new Logger('Idempotency');

  constructor(
    private readonly currentRun: () => IdempotencyRun | undefined,
    private readonly onEscape: 'log' | 'throw',
  ) {}

  beforeInsert(event: InsertEvent<unknown>): void {
    this.check(event, 'An insert');
  }

  beforeUpdate(event: UpdateEvent<unknown>): void {
    this.check(event, 'An update');
  }

  beforeRemove(event: RemoveEvent<unknown>): void {
    this.check(event, 'A removal');
  }

  beforeSoftRemove(event: SoftRemoveEvent<unknown>): void {
    this.check(event, 'A soft removal');
  }

  beforeRecover(event: RecoverEvent<unknown>): void {
    this.check(event, 'A recovery');
  }

  private check(event: WriteEvent, write: string): void {
    const run = this.currentRun();
    const runner = run && openTransactionRunner(run);
    if (!run || !runner || event.queryRunner === runner) return;
    const message =
      `${write} of ${event.metadata.name} during the transactional run of key ${JSON.stringify(run.key)} of ` +
      `${run.scope.endpoint} went outside its transaction: it commits on its own, whatever the run's outcome. ` +
      'Write through PostgresIdempotencyContext.manager or PostgresIdempotencyContext.getRepository(), or set enlistDataSource: ' +
      'true for injected repositories.';
    if (this.onEscape === 'throw') throw new TransactionEscapeError(message);
    this.logger.error(message);
  }
}
