import type { ClientConfig } from 'pg';

/** Options of `IdempotencyPostgresModule.forRoot()`: where the records live, and how the data source meets runs. */
export interface IdempotencyPostgresOptions {
  /** Table holding the records, optionally schema-qualified (`billing.idempotency_records`). Default: `idempotency_records`. */
  tableName?: string;
  /**
   * Inside a transactional run, the data source's own entity manager runs in the run's transaction, and so does
   * every repository made from it: `@InjectRepository()`, `@InjectEntityManager()`, `dataSource.manager`,
   * `dataSource.getRepository()` (and `dataSource.transaction()` becomes a savepoint of the run's). Outside
   * transactional runs, and in other requests, nothing changes. Default: `false`.
   */
  enlistDataSource?: boolean;
  /**
   * What happens when an entity is inserted, updated or removed through a connection of the data source other
   * than the transaction of the transactional run it belongs to (the write commits on its own, whatever the
   * run's outcome): `'log'` logs an error naming the entity and the route, `'throw'` fails the write with a
   * `TransactionEscapeError` (for tests and strict apps), `'ignore'` does nothing. Raw SQL is not seen. Default: `'log'`.
   */
  onTransactionEscape?: 'log' | 'throw' | 'ignore';
  /**
   * The data source reaches PostgreSQL through a transaction pooler (PgBouncer with `pool_mode = transaction`,
   * before 1.21 or without `max_prepared_statements`), which hands each transaction to whichever server connection
   * is free: the store then sends unnamed statements (named prepared statements live on one server connection), and
   * waits for in-flight outcomes (`inFlight: 'wait'`) LISTEN on `listenConnection`, or poll the record without one.
   * Default: `false` (named prepared statements, LISTEN on a connection of the data source).
   */
  transactionPooler?: boolean;
  /**
   * A connection of its own, straight to PostgreSQL (not through a transaction pooler), on which waits for in-flight
   * outcomes LISTEN: a `postgres://` URL or node-postgres's `ClientConfig`. Default: a connection of the data
   * source, or, with `transactionPooler: true`, none (waits poll the record).
   */
  listenConnection?: string | ClientConfig;
  /**
   * Claims, stored outcomes and releases of attempts without a transaction (standard mode) that are made at the same
   * moment go to PostgreSQL together, one statement for many records (like a group commit): one made while
   * `maxInFlight` statements of its kind are in flight waits for one of them to return, and goes out with every other
   * made meanwhile, up to `maxBatchSize`. One made when fewer are in flight goes out at once, as it is: no timer, and
   * no latency added at low load. Each request still gets its own record's answer, and a statement that fails fails
   * each of its requests (503), never claims for another. The batches run on connections of their own, made with the
   * data source's settings, up to `2 × maxInFlight` beside its pool, so that they never wait behind the handlers'
   * statements for one. `false`: one statement per request, on the data source's pool.
   * Default: `{ maxBatchSize: 64, maxInFlight: 2 }`.
   */
  batching?: false | { maxBatchSize?: number; maxInFlight?: number };
}

/** Options of `forRoot()` and `forRootAsync()` that shape the module itself, so they cannot come from a factory. */
export interface IdempotencyPostgresModuleExtras {
  /** Name of the TypeORM data source holding the records. Default: the default data source. */
  dataSource?: string;
}
