import type { PoolClient } from 'pg';
import type { EntityManager, QueryRunner } from 'typeorm';
import type { StoreTransaction } from '../protocol/idempotency-store.interface.js';

export interface HeldScopeLock {
  key: string;
  lockedBy: string;
}

/** A transaction on a connection of the store's own: the handler's writes go through its `manager`. */
export class PostgresStoreTransaction implements StoreTransaction {
  private done = false;
  private lost = false;
  private readonly markLost = () => (this.lost = true);

  constructor(
    readonly runner: QueryRunner,
    private readonly ended: () => void,
    /**
     * The scope's advisory lock the transaction took as it started, if it took one: its key (`scopeLockKey`) and the
     * transaction's virtual id with its backend's pid, by which a claim checks that the lock is still this transaction's.
     */
    readonly heldLock?: HeldScopeLock,
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
    await this.ending(() => this.runner.commitTransaction());
  }

  async rollback(): Promise<void> {
    await this.ending(async () => {
      if (this.runner.isTransactionActive) await this.runner.rollbackTransaction();
    });
  }

  /** Runs the commit or the rollback, then ends: discarding the connection if it failed. */
  private async ending(end: () => Promise<void>): Promise<void> {
    try {
      await end();
    } catch (error) {
      await this.end(error);
      throw error;
    }
    await this.end();
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
  private async end(failure?: unknown): Promise<void> {
    if (this.done) return;
    this.done = true;
    this.connection?.off('error', this.markLost).off('end', this.markLost);
    try {
      if (this.runner.isReleased) return;
      // A commit or rollback that failed (a transaction subscriber threw before it was sent, say) leaves the connection
      // inside its transaction, with its writes and its scope's lock: pooled, the next borrower would run in it.
      if (failure !== undefined || this.runner.isTransactionActive) await discardConnection(this.runner, failure);
      else await this.runner.release();
    } finally {
      this.ended();
    }
  }
}

/** TypeORM's PostgresQueryRunner, whose release with an error (private, as of TypeORM 1.1) discards the connection. */
interface DiscardableRunner {
  releasePostgresConnection(error: Error): Promise<void>;
}

/** Releases the runner's connection to be destroyed by the pool rather than lent again, whatever state it is in. */
export async function discardConnection(runner: QueryRunner, reason: unknown): Promise<void> {
  const error = reason instanceof Error ? reason : new Error(`connection discarded: ${String(reason)}`);
  await (runner as unknown as DiscardableRunner).releasePostgresConnection(error);
}

/** `transaction` as this store's own: a transaction of another store is a wiring mistake. */
export function ownTransaction(transaction: StoreTransaction): PostgresStoreTransaction {
  if (!(transaction instanceof PostgresStoreTransaction)) {
    throw new Error('PostgresIdempotencyStore was given a transaction of another store');
  }
  return transaction;
}
