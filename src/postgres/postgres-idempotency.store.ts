import { Logger } from '@nestjs/common';
import type { ClientConfig, Pool, QueryConfig } from 'pg';
import type { DataSource, QueryRunner } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import type {
  AbandonedQuery,
  AbandonedRecord,
  ClaimResult,
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoredStep,
  StoreHealth,
  StoreHealthCheck,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';
import { within } from '../protocol/store-bounds.js';
import { ChangeListener, dataSourceSession, ownSession } from './change-listener.js';
import { type HolderOpening, scopeLockKey, startTransactionLocking } from './holder-locks.js';
import type { IdempotencyPostgresOptions } from './idempotency-postgres-options.interface.js';
import { quoteTableName } from './postgres-identifiers.js';
import { discardConnection, PostgresStoreTransaction } from './postgres-store-transaction.js';
import { clientConfig, DEFAULT_BATCH_LIMITS } from './postgres-options.js';
import { type BatchedClaim, type BatchedCompletion, type BatchLimits, RecordBatches } from './record-batches.js';
import { BatchConnections } from './batch-connections.js';
import { ownTransaction } from './postgres-store-transaction.js';
import { type StatementConnections, StoreStatements } from './store-statements.js';
import { RecordPolling } from '../store-kit/record-polling.js';
import {
  changeChannel,
  type ClaimRow,
  heldRecordStatement,
  type RecordStatements,
  recordStatements,
  toExistingRecord,
} from './record-statements.js';
import { checkRecordsTable } from './records-table-check.js';
import {
  type ClientClass,
  dataSourceBehindPoolerError,
  listenConnectionBehindPoolerError,
  sharedBackend,
} from './transaction-pooler.js';
import { TransactionSlots } from './transaction-slots.js';

/**
 * The claim's upsert sees the latest committed version of a conflicting row, but the read of the existing
 * row sees the statement's snapshot. When the two differ (a row inserted, taken over or released by an
 * attempt that committed after the snapshot was taken), the statement returns no row, and running it again,
 * with a new snapshot, resolves it.
 */
const CLAIM_ATTEMPTS = 5;

/** How the store meets a transaction pooler: `IdempotencyPostgresOptions`' `transactionPooler` and `listenConnection`. */
export type PostgresStoreConnectionOptions = Pick<
  IdempotencyPostgresOptions,
  'transactionPooler' | 'listenConnection'
> & {
  /** See `IdempotencyPostgresOptions.batching`. Default: `DEFAULT_BATCH_LIMITS`. */
  batching?: BatchLimits | false;
};

/**
 * An outcome whose body is larger goes out in a statement of its own: a batch carries bodies as text in an array
 * (twice their size), where a statement of its own sends them as bytes.
 */
const BATCHED_BODY_BYTES = 64 * 1024;

/** An abandoned record as the statement reads it. */
interface AbandonedRow {
  account: string;
  endpoint: string;
  key: string;
  fingerprint: string;
  attempts: number;
  steps: string[];
}

/** The record store on PostgreSQL, through the application's TypeORM data source. */
export class PostgresIdempotencyStore implements IdempotencyStore {
  private readonly statements: RecordStatements;
  /** In-flight waits: LISTEN (on the data source, or on `listenConnection`), or reads of the record. */
  private readonly outcomeWaits: ChangeListener | RecordPolling;
  private readonly transactionSlots: TransactionSlots;
  /** Named prepared statements, unless a transaction pooler would hand them to other clients. */
  private readonly namedStatements: boolean;
  private readonly listenConnection?: ClientConfig;
  /** Whether transactional attempts open their transaction before their claim, holding the scope's lock. */
  private holderTransactions: boolean;
  /** The records table's OID, from which scope lock keys are derived; fetched once, at first use. */
  private tableOid?: Promise<string>;
  /** Every attempt's claims, and standard attempts' outcomes and releases, coalesced; none with `batching: false`. */
  private readonly batches?: RecordBatches;
  /** The connections the batches run on, as many as the claims' and outcomes' in flight. */
  private readonly batchConnections?: BatchConnections;
  /** How its statements are sent, and how many have been. */
  private readonly statementsOf: StoreStatements;

  /** The statements this store has sent, each one round trip: what a benchmark divides by its requests. */
  get statementsSent(): number {
    return this.statementsOf.count;
  }

  /**
   * Transactional attempts that run at once, each on a pooled connection of its own: the transaction slots (the
   * pool's size less two), less the one the LISTEN connection holds when it is the data source's.
   */
  readonly capacity: number;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tableName: string,
    options: PostgresStoreConnectionOptions = {},
  ) {
    const channel = changeChannel(tableName);
    // Each transactional run holds a pooled connection for as long as its handler runs, and so does the LISTEN
    // connection while it is open. Leaving two free keeps claims, finalizes and lease renewals flowing, and
    // stops transactions from starving each other of the connections their handlers need.
    const { extra, poolSize, isolationLevel } = dataSource.options as {
      extra?: { max?: number };
      poolSize?: number;
      isolationLevel?: string;
    };
    const poolMax = extra?.max ?? poolSize ?? 10;
    this.transactionSlots = new TransactionSlots(Math.max(1, poolMax - 2));
    let listensOnThePool = false;
    // A holder transaction takes its connection before its claim does: it needs a pool that still has one for the
    // claim once a slot and the LISTEN connection are taken (a pool of 1 or 2 would leave every claim waiting until
    // it times out). Behind a transaction pooler, none either (see beginHoldingTransaction). And none under an
    // isolation above read committed, whose snapshot would be taken before the claim commits (holder-locks.ts).
    this.holderTransactions =
      options.transactionPooler !== true &&
      poolMax - 2 >= 1 &&
      (isolationLevel === undefined || /^READ (UN)?COMMITTED$/i.test(isolationLevel));
    this.statements = recordStatements(tableName, channel);
    this.namedStatements = options.transactionPooler !== true;
    const batching = options.batching ?? DEFAULT_BATCH_LIMITS;
    if (batching !== false) {
      const fallbackConnections = this.namedStatements ? 'batches' : 'pool';
      this.batchConnections = new BatchConnections(
        () => (this.dataSource.driver as PostgresDriver).master as Pool,
        2 * batching.maxInFlight,
        this.namedStatements,
      );
      this.batches = new RecordBatches(
        this.statements,
        (statement, values) => this.statementsOf.query(statement, values, undefined, 'batches'),
        // One by one on the batches' connections, where a row lock is waited for 500 ms at most: a record held by a
        // long transaction fails its own operation then (a 503, a finalize retried later), rather than hold a
        // connection of the data source's pool for as long as the lock lasts. Behind a transaction pooler, whose
        // sessions have no such bound, on the data source's pool, which is the larger.
        {
          claim: (claim) => this.claimAlone(claim, fallbackConnections),
          complete: (completion) => this.completeAlone(completion, undefined, fallbackConnections),
          release: (claim) => this.releaseAlone(claim, fallbackConnections),
        },
        batching,
      );
    }
    this.statementsOf = new StoreStatements(dataSource, this.namedStatements, this.batchConnections);
    if (options.listenConnection !== undefined) {
      this.listenConnection = clientConfig(options.listenConnection);
      this.outcomeWaits = new ChangeListener(
        channel,
        ownSession(() => this.clientClass(), this.listenConnection),
      );
    } else if (options.transactionPooler === true) {
      const held = heldRecordStatement(tableName);
      this.outcomeWaits = new RecordPolling(
        async (scope) => (await this.statementsOf.changed(held, [scope.account, scope.endpoint, scope.key])) === 1,
      );
    } else {
      this.outcomeWaits = new ChangeListener(channel, dataSourceSession(dataSource, this.transactionSlots));
      listensOnThePool = this.transactionSlots.capacity > 1;
    }
    this.capacity = this.transactionSlots.capacity - (listensOnThePool ? 1 : 0);
  }

  async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
    holder?: StoreTransaction,
  ): Promise<ClaimResult> {
    const lockKey = await this.lockKey(scope);
    const heldLock = holder === undefined ? undefined : ownTransaction(holder).heldLock;
    const lockedBy = heldLock?.key === lockKey && !holder?.connectionLost ? heldLock.lockedBy : null;
    const claim = { scope, fingerprint, attempt, timing, lockKey, lockedBy };
    for (let tries = 0; tries < CLAIM_ATTEMPTS; tries += 1) {
      const row = this.batches ? await this.batches.claim(claim) : await this.claimAlone(claim);
      if (!row) continue;
      if (row.claimed) return claimedResult(row);
      return { claimed: false, existing: toExistingRecord(row) };
    }
    throw new Error(`Idempotency claim found neither a free nor a held record after ${CLAIM_ATTEMPTS} attempts`);
  }

  async renew({ scope, attempt }: IdempotencyClaim, timing: ClaimTiming): Promise<boolean> {
    const parameters = [scope.account, scope.endpoint, scope.key, attempt, timing.leaseSeconds, timing.ttlSeconds];
    return (await this.statementsOf.changed(this.statements.renew, parameters)) === 1;
  }

  async complete(
    claim: IdempotencyClaim,
    response: StoredResponse,
    ttlSeconds: number,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    if (!transaction && this.batches && response.body.length <= BATCHED_BODY_BYTES) {
      return this.batches.complete({ claim, response, ttlSeconds });
    }
    return this.completeAlone({ claim, response, ttlSeconds }, transaction);
  }

  async release(claim: IdempotencyClaim): Promise<boolean> {
    return this.batches ? this.batches.release(claim) : this.releaseAlone(claim);
  }

  async recordStep(
    { scope, attempt }: IdempotencyClaim,
    step: StoredStep,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    const parameters = [scope.account, scope.endpoint, scope.key, attempt, step.name, step.result];
    return (await this.statementsOf.changed(this.statements.recordStep, parameters, transaction)) === 1;
  }

  /** A claim in a statement of its own. */
  private async claimAlone(claim: BatchedClaim, connections?: StatementConnections): Promise<ClaimRow | undefined> {
    const { scope, fingerprint, attempt, timing, lockKey, lockedBy } = claim;
    const parameters = [
      ...[scope.account, scope.endpoint, scope.key, fingerprint, attempt],
      ...[timing.leaseSeconds, timing.ttlSeconds, lockedBy, lockKey],
    ];
    const [row] = await this.statementsOf.query<ClaimRow>(this.statements.claim, parameters, undefined, connections);
    return row;
  }

  private async completeAlone(
    { claim: { scope, attempt }, response, ttlSeconds }: BatchedCompletion,
    transaction?: StoreTransaction,
    connections?: StatementConnections,
  ): Promise<boolean> {
    const parameters = [
      ...[scope.account, scope.endpoint, scope.key, attempt],
      ...[response.status, JSON.stringify(response.headers), response.body, ttlSeconds],
    ];
    return (await this.statementsOf.changed(this.statements.complete, parameters, transaction, connections)) === 1;
  }

  private async releaseAlone(
    { scope, attempt }: IdempotencyClaim,
    connections?: StatementConnections,
  ): Promise<boolean> {
    const parameters = [scope.account, scope.endpoint, scope.key, attempt];
    return (await this.statementsOf.changed(this.statements.release, parameters, undefined, connections)) === 1;
  }

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    if (this.outcomeWaits instanceof RecordPolling) return this.outcomeWaits.markAwaited(scope);
    return (
      (await this.statementsOf.changed(this.statements.markAwaited, [scope.account, scope.endpoint, scope.key])) === 1
    );
  }

  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    return this.outcomeWaits.wait(scope, timeoutMs);
  }

  async beginTransaction(timeoutMs?: number): Promise<PostgresStoreTransaction> {
    await this.transactionSlots.acquire(timeoutMs);
    const runner = await this.openTransaction(async (started) => started.startTransaction());
    return new PostgresStoreTransaction(runner, () => this.transactionSlots.release());
  }

  /**
   * A transaction that tries the scope's advisory lock as it starts, in the same round trip: held until it ends, which
   * PostgreSQL makes happen at once when the session dies (its client killed, its connection cut).
   *
   * Behind a transaction pooler, none: a holder transaction keeps a server connection while its claim waits for
   * another, and a pooler's server connections may be fewer than the application's (PgBouncer's pool of a few for
   * pools of ten): concurrent holders would take them all, and their claims wait until they time out. There the claim
   * comes first, and a dead holder's key is freed when its lease lapses. None either when the pool is too small to
   * leave the claim a connection, or under an isolation above read committed: the first such transaction met (the
   * database's or role's `default_transaction_isolation`) is rolled back, and no holder is opened again.
   */
  async beginHoldingTransaction(scope: IdempotencyScope): Promise<PostgresStoreTransaction | undefined> {
    if (!this.holderTransactions) return undefined;
    if (!this.transactionSlots.tryAcquire()) return undefined;
    let lockKey: string;
    try {
      lockKey = await this.lockKey(scope);
    } catch (error) {
      this.transactionSlots.release();
      throw error;
    }
    let opening: HolderOpening = { readCommitted: false };
    const runner = await this.openTransaction(async (started) => {
      opening = await startTransactionLocking(started, lockKey);
    });
    const { lockedBy } = opening;
    const transaction = new PostgresStoreTransaction(
      runner,
      () => this.transactionSlots.release(),
      lockedBy === undefined ? undefined : { key: lockKey, lockedBy },
    );
    if (opening.readCommitted) return transaction;
    this.holderTransactions = false;
    // Said once, when holders stop: crash recovery falls back to the lease from here on, which an operator should know.
    new Logger('Idempotency').warn(
      "Transactional attempts open no holder transaction from now on: this database's or role's " +
        'default_transaction_isolation is above read committed, where a holder would not see its own claim. A key ' +
        "whose attempt crashed is freed when its lease lapses, not at once; set the data source's isolationLevel: " +
        "'READ COMMITTED' to keep holders (docs/transactional-mode.md).",
    );
    await transaction.rollback();
    return undefined;
  }

  /**
   * Connects a runner and starts its transaction, in a slot already taken. If either fails, the slot is given back
   * and so is the connection, destroyed rather than pooled: it may be inside a transaction, aborted or not, that
   * holds a scope's lock, and the next borrower would run in it.
   */
  private async openTransaction(start: (runner: QueryRunner) => Promise<void>): Promise<QueryRunner> {
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.connect();
      await start(runner);
      return runner;
    } catch (error) {
      // TypeORM's `release()` gives a connection back as it is; with an error, the pool destroys it.
      await discardConnection(runner, error);
      this.transactionSlots.release();
      throw error;
    }
  }

  /** The key of the scope's advisory lock, from the records table's OID (fetched at first use, again if that failed). */
  private async lockKey(scope: IdempotencyScope): Promise<string> {
    this.tableOid ??= this.dataSource
      .query<{ oid: string | null }[]>('SELECT to_regclass($1)::oid::text AS oid', [quoteTableName(this.tableName)])
      .then(([{ oid }]) => {
        if (oid === null) throw new Error(`The idempotency table ${this.tableName} does not exist`);
        return oid;
      });
    try {
      return scopeLockKey(await this.tableOid, scope);
    } catch (error) {
      this.tableOid = undefined;
      throw error;
    }
  }

  /**
   * Checks the records table, then that no transaction pooler stands where a session is needed: in front of the data
   * source with named statements and LISTEN (without `transactionPooler: true`), or in front of `listenConnection`.
   */
  async checkSchema(): Promise<void> {
    await checkRecordsTable(this.dataSource, this.tableName);
    if (this.namedStatements) {
      const pool = (this.dataSource.driver as PostgresDriver).master as { options: ClientConfig };
      const backend = await this.poolerCheck(pool.options, 'its data source');
      if (backend !== undefined) throw dataSourceBehindPoolerError(backend);
    }
    if (this.listenConnection) {
      const backend = await this.poolerCheck(this.listenConnection, 'listenConnection');
      if (backend !== undefined) throw listenConnectionBehindPoolerError(backend);
    }
  }

  /** `sharedBackend`, its failure (a connection limit reached, a timeout) said as what it is: a check not made. */
  private async poolerCheck(config: ClientConfig, what: string): Promise<number | undefined> {
    try {
      return await sharedBackend(this.clientClass(), config);
    } catch (error) {
      throw new Error(
        `the records table is in order, but whether a transaction pooler stands in front of ${what} could not be ` +
          `checked: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error },
      );
    }
  }

  /**
   * `SELECT 1` on a pooled connection, and on one of the batches' own, within `timeoutMs` (waiting for the pool's
   * connection included; the statement itself is bounded by the driver's `query_timeout`, and its connection
   * discarded if it times out): standard claims go through the batches' (until the store is closed); then, when
   * waits listen (not behind a transaction pooler without `listenConnection`, where they poll) and are on, whether the
   * LISTEN connection is up, opened again if it was lost, within what is left of `timeoutMs`.
   */
  async checkHealth(timeoutMs: number, check: StoreHealthCheck = {}): Promise<StoreHealth> {
    const deadline = Date.now() + timeoutMs;
    const probe = { text: 'SELECT 1', query_timeout: timeoutMs } as QueryConfig;
    const roundTrip = Promise.all([
      this.statementsOf.send(probe),
      this.batchConnections?.closed === false ? this.statementsOf.send(probe, undefined, 'batches') : undefined,
    ]);
    await within(roundTrip, timeoutMs, () => new Error(`the database did not answer within ${timeoutMs} ms`));
    if (this.outcomeWaits instanceof RecordPolling) return {};
    const listening = await this.outcomeWaits.isListening(Math.max(0, deadline - Date.now()), check.listen === true);
    return { listening };
  }

  async findAbandoned(query: AbandonedQuery): Promise<AbandonedRecord[]> {
    const { endpoints, maxAttempts, minAttempts = 0, backoffSeconds, maxBackoffSeconds, limit } = query;
    const rows = await this.statementsOf.query<AbandonedRow>(this.statements.abandoned, [
      ...[endpoints, maxAttempts ?? null, backoffSeconds, maxBackoffSeconds, limit, minAttempts],
    ]);
    return rows.map(({ account, endpoint, key, fingerprint, attempts, steps }) => ({
      scope: { account, endpoint, key },
      fingerprint,
      attempts,
      steps,
    }));
  }

  purgeExpired(batchSize: number): Promise<number> {
    return this.statementsOf.changed(this.statements.purge, [batchSize]);
  }

  /** Stops listening for changes, giving the listening connection back to the pool (or closing its own). */
  async close(): Promise<void> {
    try {
      await this.outcomeWaits.close();
    } finally {
      await this.batchConnections?.close();
    }
  }

  /** node-postgres's `Client`, as TypeORM loaded it for the data source. */
  private clientClass(): ClientClass {
    return ((this.dataSource.driver as PostgresDriver).postgres as { Client: ClientClass }).Client;
  }
}

/** A won claim, with the steps of the record it took over (none on a new one). */
function claimedResult(row: ClaimRow): ClaimResult {
  const takeover = row.takeover === true;
  if (!row.steps?.length) return { claimed: true, takeover };
  return { claimed: true, takeover, steps: row.steps.map(({ name, result }) => ({ name, result })) };
}
