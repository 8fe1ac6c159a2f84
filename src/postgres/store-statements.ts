import type { PoolClient, QueryConfig } from 'pg';
import type { DataSource } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import type { StoreTransaction } from '../protocol/idempotency-store.interface.js';
import type { BatchConnections } from './batch-connections.js';
import { ownTransaction } from './postgres-store-transaction.js';
import type { Statement } from './record-statements.js';
import { namedStatementFailure } from './transaction-pooler.js';

/** Where a statement without a transaction runs: on the data source's pool, or on the batches' own connections. */
export type StatementConnections = 'pool' | 'batches';

/**
 * How the store sends its statements, and how many it has sent: each on a pooled connection of the data source, on
 * a transaction's, or on the batches' own. As a named prepared statement, PostgreSQL plans it once per connection
 * instead of at every request; behind a transaction pooler, unnamed (parsed every time), since the pooler's next
 * server connection may not have it, or have another client's of that name.
 */
export class StoreStatements {
  private sent = 0;

  constructor(
    private readonly dataSource: DataSource,
    /** Named prepared statements, unless a transaction pooler would hand them to other clients. */
    private readonly named: boolean,
    private readonly batchConnections?: BatchConnections,
  ) {}

  /** The statements sent so far, each one round trip. */
  get count(): number {
    return this.sent;
  }

  /** The rows a counting statement changed (`countingRows` in record-statements.ts). */
  async changed(
    statement: Statement,
    parameters: unknown[],
    transaction?: StoreTransaction,
    connections?: StatementConnections,
  ): Promise<number> {
    const [{ count }] = await this.query<{ count: number }>(statement, parameters, transaction, connections);
    return count;
  }

  async query<Row>(
    statement: Statement,
    values: unknown[],
    transaction?: StoreTransaction,
    connections: StatementConnections = 'pool',
  ): Promise<Row[]> {
    try {
      return await this.send<Row>(
        this.named ? { ...statement, values } : { text: statement.text, values },
        transaction,
        connections,
      );
    } catch (error) {
      throw (this.named && namedStatementFailure(error)) || error;
    }
  }

  /** Sends `config` as it is (named or not as it says). */
  async send<Row>(
    config: QueryConfig,
    transaction?: StoreTransaction,
    connections: StatementConnections = 'pool',
  ): Promise<Row[]> {
    this.sent += 1;
    if (transaction) {
      const client = ownTransaction(transaction).connection as PoolClient;
      return (await client.query(config)).rows as Row[];
    }
    const [client, release] =
      connections === 'batches' && this.batchConnections
        ? await this.batchConnections.connect()
        : ((await (this.dataSource.driver as PostgresDriver).obtainMasterConnection()) as [
            PoolClient,
            (discard?: Error) => void,
          ]);
    // A checked-out client has no error listener of the pool's: a lost connection must not crash the process.
    let lost: Error | undefined;
    const onError = (error: Error) => (lost = error);
    client.on('error', onError);
    try {
      return (await client.query(config)).rows as Row[];
    } catch (error) {
      lost ??= error as Error; // the pool discards the connection rather than reuse one in an unknown state
      throw error;
    } finally {
      client.off('error', onError);
      release(lost);
    }
  }
}
