import { Inject, Injectable } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { IDEMPOTENCY_DATA_SOURCE, IDEMPOTENCY_POSTGRES_SETTINGS } from './postgres.tokens.js';
import { currentRun } from '../protocol/current-run.js';
import type { PostgresSettings } from './postgres-options.js';
import { openTransactionRunner } from './run-transaction.js';
import { enlistEntityManager } from './entity-manager-enlistment.js';
import { TransactionEscapeSubscriber } from './transaction-escape.subscriber.js';

/**
 * Ties the module's data source to the transactions of transactional runs, as the options ask: its entity
 * manager (and every repository made from it) joins the current run's transaction (`enlistDataSource`), and
 * writes that go outside it are flagged (`onTransactionEscape`). Set up as soon as Nest creates the module,
 * before any request or `execute()` can run; it lasts as long as the data source, which Nest's TypeORM module
 * destroys with the application.
 */
@Injectable()
export class RunTransactionBinding {
  constructor(
    @Inject(IDEMPOTENCY_DATA_SOURCE) dataSource: DataSource,
    @Inject(IDEMPOTENCY_POSTGRES_SETTINGS) { enlist, onEscape }: PostgresSettings,
  ) {
    if (enlist) {
      // Only a transaction on this very data source can be joined; another's connections are not this one's.
      const currentRunner = () => {
        const run = currentRun();
        const runner = run && openTransactionRunner(run);
        return runner?.dataSource === dataSource ? runner : undefined;
      };
      enlistEntityManager(dataSource.manager, currentRunner);
    }
    if (onEscape !== 'ignore') dataSource.subscribers.push(new TransactionEscapeSubscriber(currentRun, onEscape));
  }
}
