import type { PoolClient, QueryResult } from 'pg';
import type { EntityManager, QueryRunner } from 'typeorm';
import type { StoreTransaction } from '../protocol/idempotency-store.interface.js';

/** A transaction on a connection of the store's own: the handler's writes go through its `manager`. */
export class PostgresStoreTransaction implements StoreTransaction {
  private done = false;
  private lost = false;
  private readonly markLost = () => (this.lost = true);

  constructor(
    readonly runner: QueryRunner,
    private readonly ended: () => void,
    /** Its claim is its own uncommitted record (see `StoreTransaction.holdsClaim`). */
    readonly holdsClaim = false,
  ) {
    // pg reports a connection lost under a query as that query's error, and to the client as 'error'/'end'.
    this.connection?.on('error', this.markLost).on('end', this.markLost);
  }

  get connectionLost(): boolean {
    return this.lost;
  }

  get manager(): EntityManager {
    return this.runner.manager;
  }

  async commit(): Promise<void> {
    try {
      await this.runner.commitTransaction();
    } finally {
      await this.end();
    }
  }

  async rollback(): Promise<void> {
    try {
      if (this.runner.isTransactionActive) await this.runner.rollbackTransaction();
    } finally {
      await this.end();
    }
  }

  /**
   * Starts the transaction with `statements` after `BEGIN` in the same round trip (a simple query, so their values
   * must be inlined), and tells TypeORM's runner, as its own `startTransaction()` would, that it is in a transaction.
   * Resolves with each statement's result, `BEGIN`'s first.
   */
  async beginWith(isolationLevel: string | undefined, statements: string[]): Promise<QueryResult[]> {
    const runner = this.runnerState();
    runner.isTransactionActive = true;
    await runner.broadcaster.broadcast('BeforeTransactionStart');
    const begin = isolationLevel ? `BEGIN ISOLATION LEVEL ${isolationLevel}` : 'BEGIN';
    const results = await this.simpleQuery([begin, ...statements]);
    runner.transactionDepth = 1;
    await runner.broadcaster.broadcast('AfterTransactionStart');
    return results;
  }

  /**
   * Runs `statements` and commits, in one round trip, telling TypeORM's runner as its own `commitTransaction()` would.
   * Resolves with the last statement's result. When one fails, nothing is committed and the transaction is left to
   * roll back.
   */
  async commitWith(statements: string[]): Promise<QueryResult> {
    const runner = this.runnerState();
    await runner.broadcaster.broadcast('BeforeTransactionCommit');
    try {
      const results = await this.simpleQuery([...statements, 'COMMIT']);
      const result = results[results.length - 2];
      runner.isTransactionActive = false;
      runner.transactionDepth = 0;
      await runner.broadcaster.broadcast('AfterTransactionCommit');
      return result;
    } finally {
      if (!runner.isTransactionActive) await this.end();
    }
  }

  /** What TypeORM's runner knows of its transaction, which its own transaction methods keep. */
  private runnerState() {
    return this.runner as unknown as Pick<QueryRunner, 'broadcaster'> & {
      isTransactionActive: boolean;
      transactionDepth: number;
    };
  }

  private async simpleQuery(statements: string[]): Promise<QueryResult[]> {
    const connection = this.connection as PoolClient;
    // Several statements make one simple query, answered with an array of results.
    return (await connection.query(statements.join(';\n'))) as unknown as QueryResult[];
  }

  abandon(): void {
    this.connection?.connection?.stream?.destroy();
  }

  /** The transaction's connection: the store runs its own statements of the transaction on it. */
  get connection(): (PoolClient & { connection?: { stream?: { destroy(): void } } }) | undefined {
    return (this.runner as QueryRunner & { databaseConnection?: PoolClient }).databaseConnection;
  }

  /**
   * Gives the connection and the transaction slot back, once. Tracked here, not by `runner.isReleased`: TypeORM
   * releases a runner whose connection died on its own, and the slot must still be freed then.
   */
  private async end(): Promise<void> {
    if (this.done) return;
    this.done = true;
    this.connection?.off('error', this.markLost).off('end', this.markLost);
    try {
      if (!this.runner.isReleased) await this.runner.release();
    } finally {
      this.ended();
    }
  }
}
