import { createHash } from 'node:crypto';
import type { PoolClient } from 'pg';
import type { DataSource } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import type {
  ClaimResult,
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
  TransactionClaimResult,
  TransactionClaimTiming,
} from '../protocol/idempotency-store.interface.js';
import { ChangeListener, scopeDigest } from './change-listener.js';
import { PostgresStoreTransaction } from './postgres-store-transaction.js';
import {
  CLAIM_NOT_HELD,
  type ClaimRow,
  inlined,
  type RecordStatements,
  recordStatements,
  type Statement,
  toExistingRecord,
} from './record-statements.js';
import { checkRecordsTable } from './records-table-check.js';
import { TransactionSlots } from './transaction-slots.js';

/**
 * The claim's upsert sees the latest committed version of a conflicting row, but the read of the existing
 * row sees the statement's snapshot. When the two differ (a row inserted, taken over or released by an
 * attempt that committed after the snapshot was taken), the statement returns no row, and running it again,
 * with a new snapshot, resolves it.
 */
const CLAIM_ATTEMPTS = 5;

/** SQLSTATEs of a claim in a transaction: another attempt's open claim outlasted the lock wait; a snapshot too old. */
const LOCK_NOT_AVAILABLE = '55P03';
const SERIALIZATION_FAILURE = '40001';

/** Where the work of a transaction that holds its claim begins. */
const WORK_SAVEPOINT = 'idempotency_work';

/** The claim statement's parameters, in order. */
function claimParameters(scope: IdempotencyScope, fingerprint: string, attempt: string, timing: ClaimTiming) {
  return [scope.account, scope.endpoint, scope.key, fingerprint, attempt, timing.leaseSeconds, timing.ttlSeconds];
}

function unresolvedClaim(): Error {
  return new Error(`Idempotency claim found neither a free nor a held record after ${CLAIM_ATTEMPTS} attempts`);
}

/** The record store on PostgreSQL, through the application's TypeORM data source. */
export class PostgresIdempotencyStore implements IdempotencyStore {
  private readonly statements: RecordStatements;
  private readonly changes: ChangeListener;
  private readonly transactionSlots: TransactionSlots;
  /** The data source's isolation level for transactions, as TypeORM's `startTransaction()` would set it. */
  private readonly isolationLevel?: string;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tableName: string,
  ) {
    // A fixed-length channel name: PostgreSQL's identifiers stop at 63 bytes.
    const channel = `idempotency_${createHash('md5').update(tableName).digest('hex').slice(0, 20)}`;
    // Each transactional run holds a pooled connection for as long as its handler runs, and so does the LISTEN
    // connection while it is open. Leaving two free keeps claims, finalizes and lease renewals flowing, and
    // stops transactions from starving each other of the connections their handlers need.
    const { extra, poolSize } = dataSource.options as { extra?: { max?: number }; poolSize?: number };
    this.transactionSlots = new TransactionSlots(Math.max(1, (extra?.max ?? poolSize ?? 10) - 2));
    this.changes = new ChangeListener(dataSource, channel, this.transactionSlots);
    this.statements = recordStatements(tableName, channel);
    this.isolationLevel = (dataSource.options as { isolationLevel?: string }).isolationLevel;
  }

  async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
  ): Promise<ClaimResult> {
    for (let tries = 0; tries < CLAIM_ATTEMPTS; tries += 1) {
      const [row] = await this.query<ClaimRow>(
        this.statements.claim,
        claimParameters(scope, fingerprint, attempt, timing),
      );
      if (!row) continue;
      if (row.claimed) return { claimed: true, takeover: row.takeover === true };
      return { claimed: false, existing: toExistingRecord(row) };
    }
    throw unresolvedClaim();
  }

  /**
   * The claim as the first statement of the work's transaction, in the round trip of its `BEGIN`, behind a lock of
   * the scope's own held until the transaction ends. A concurrent attempt waits on that lock for `lockWaitMs` (then:
   * `locked`), and on nothing else for so short a time; a holder whose process dies has its transaction rolled back
   * with its connection, freeing the key at once; one idle in it past `holdSeconds` is ended by PostgreSQL (unless
   * the session has a limit of its own).
   */
  async claimInTransaction(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: TransactionClaimTiming,
  ): Promise<TransactionClaimResult> {
    const values = claimParameters(scope, fingerprint, attempt, timing);
    for (let tries = 0; tries < CLAIM_ATTEMPTS; tries += 1) {
      const transaction = await this.openTransaction(timing.slotTimeoutMs, true);
      const connection = transaction.connection as PoolClient;
      const escape = (text: string) => connection.escapeLiteral(text);
      const idleLimit = `'${Math.ceil(timing.holdSeconds * 1000)}ms'`;
      let row: ClaimRow | undefined;
      try {
        const results = await transaction.beginWith(this.isolationLevel, [
          // The lock wait is bounded for the scope's lock alone: the session's own lock_timeout is kept aside and
          // given back for the claim and the work's statements.
          `SELECT set_config('idempotency.lock_timeout', current_setting('lock_timeout'), true)`,
          `SELECT set_config('lock_timeout', '${Math.max(1, Math.ceil(timing.lockWaitMs))}ms', true),
                  set_config('idle_in_transaction_session_timeout', CASE current_setting('idle_in_transaction_session_timeout')
                    WHEN '0' THEN ${idleLimit} ELSE current_setting('idle_in_transaction_session_timeout') END, true)`,
          inlined(this.statements.lockScope, values, escape),
          `SELECT set_config('lock_timeout', current_setting('idempotency.lock_timeout'), true)`,
          inlined(this.statements.claim, values, escape),
          // The work's writes can be discarded without the claim: a failed handler's final response is stored.
          `SAVEPOINT ${WORK_SAVEPOINT}`,
        ]);
        [row] = results[5].rows as ClaimRow[];
      } catch (error) {
        await transaction.rollback().catch(() => undefined);
        const code = (error as { code?: string }).code;
        if (code === LOCK_NOT_AVAILABLE) return { claimed: false, locked: true };
        if (code === SERIALIZATION_FAILURE) continue;
        throw error;
      }
      if (row?.claimed) return { claimed: true, takeover: row.takeover === true, transaction };
      await transaction.rollback();
      if (row) return { claimed: false, existing: toExistingRecord(row) };
    }
    throw unresolvedClaim();
  }

  async commitWithOutcome(
    { scope, attempt }: IdempotencyClaim,
    response: StoredResponse | undefined,
    ttlSeconds: number,
    transaction: StoreTransaction,
    discardWrites = false,
  ): Promise<boolean> {
    const open = this.ownTransaction(transaction);
    const claim = [scope.account, scope.endpoint, scope.key, attempt];
    const escape = (text: string) => (open.connection as PoolClient).escapeLiteral(text);
    if (!response) {
      const [{ count }] = (await open.commitWith([inlined(this.statements.release, claim, escape)])).rows as Array<{
        count: number;
      }>;
      return count === 1;
    }
    if (discardWrites && !open.holdsClaim) {
      await open.rollback();
      return this.complete({ scope, attempt }, response, ttlSeconds);
    }
    const completion = inlined(
      this.statements.completeHeld,
      [...claim, response.status, JSON.stringify(response.headers), response.body, ttlSeconds],
      escape,
    );
    try {
      await open.commitWith(discardWrites ? [`ROLLBACK TO SAVEPOINT ${WORK_SAVEPOINT}`, completion] : [completion]);
      return true;
    } catch (error) {
      if ((error as { code?: string }).code !== CLAIM_NOT_HELD) throw error;
      await open.rollback();
      return false;
    }
  }

  async renew({ scope, attempt }: IdempotencyClaim, timing: ClaimTiming): Promise<boolean> {
    const parameters = [scope.account, scope.endpoint, scope.key, attempt, timing.leaseSeconds, timing.ttlSeconds];
    return (await this.count(this.statements.renew, parameters)) === 1;
  }

  async complete(
    { scope, attempt }: IdempotencyClaim,
    response: StoredResponse,
    ttlSeconds: number,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    const parameters = [
      scope.account,
      scope.endpoint,
      scope.key,
      attempt,
      response.status,
      JSON.stringify(response.headers),
      response.body,
      ttlSeconds,
    ];
    return (await this.count(this.statements.complete, parameters, transaction)) === 1;
  }

  async release({ scope, attempt }: IdempotencyClaim): Promise<boolean> {
    return (await this.count(this.statements.release, [scope.account, scope.endpoint, scope.key, attempt])) === 1;
  }

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    return (await this.count(this.statements.markAwaited, [scope.account, scope.endpoint, scope.key])) === 1;
  }

  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    return this.changes.wait(scopeDigest(scope), timeoutMs);
  }

  async beginTransaction(timeoutMs?: number): Promise<PostgresStoreTransaction> {
    const transaction = await this.openTransaction(timeoutMs, false);
    try {
      await transaction.runner.startTransaction();
    } catch (error) {
      await transaction.rollback();
      throw error;
    }
    return transaction;
  }

  /** A connection of its own, in one of the transaction slots, on which a transaction is to begin. */
  private async openTransaction(timeoutMs: number | undefined, holdsClaim: boolean): Promise<PostgresStoreTransaction> {
    await this.transactionSlots.acquire(timeoutMs);
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.connect();
    } catch (error) {
      await runner.release();
      this.transactionSlots.release();
      throw error;
    }
    return new PostgresStoreTransaction(runner, () => this.transactionSlots.release(), holdsClaim);
  }

  checkSchema(): Promise<void> {
    return checkRecordsTable(this.dataSource, this.tableName);
  }

  purgeExpired(batchSize: number): Promise<number> {
    return this.count(this.statements.purge, [batchSize]);
  }

  /** Stops listening for changes, giving the listening connection back to the pool. */
  async close(): Promise<void> {
    await this.changes.close();
  }

  private ownTransaction(transaction: StoreTransaction): PostgresStoreTransaction {
    if (!(transaction instanceof PostgresStoreTransaction)) {
      throw new Error('PostgresIdempotencyStore was given a transaction of another store');
    }
    return transaction;
  }

  private async count(statement: Statement, parameters: unknown[], transaction?: StoreTransaction): Promise<number> {
    const [{ count }] = await this.query<{ count: number }>(statement, parameters, transaction);
    return count;
  }

  /**
   * Runs a statement as a named prepared statement on a pooled connection (or the transaction's): PostgreSQL
   * plans it once per connection instead of at every request.
   */
  private async query<Row>(statement: Statement, values: unknown[], transaction?: StoreTransaction): Promise<Row[]> {
    const config = { ...statement, values };
    if (transaction) {
      const client = this.ownTransaction(transaction).connection as PoolClient;
      return (await client.query(config)).rows as Row[];
    }
    const [client, release] = (await (this.dataSource.driver as PostgresDriver).obtainMasterConnection()) as [
      PoolClient,
      (discard?: Error) => void,
    ];
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
