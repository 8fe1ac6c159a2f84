import type { EntityManager, QueryRunner } from 'typeorm';
import type { IdempotencyRun } from '../protocol/idempotency-run.js';
import { PostgresStoreTransaction } from './postgres-store-transaction.js';

/** The entity manager of a run's transaction (a transactional route of the PostgreSQL store); `undefined` elsewhere. */
export function entityManagerOf(run: IdempotencyRun | undefined): EntityManager | undefined {
  return run?.transaction instanceof PostgresStoreTransaction ? run.transaction.manager : undefined;
}

/**
 * The query runner of the run's transaction while that transaction is open; `undefined` on a run without one,
 * and once it has committed or rolled back (work the handler left behind then runs outside any transaction).
 */
export function openTransactionRunner(run: IdempotencyRun): QueryRunner | undefined {
  const runner = entityManagerOf(run)?.queryRunner;
  return runner && !runner.isReleased && runner.isTransactionActive ? runner : undefined;
}
