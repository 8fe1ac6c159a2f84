import { createHash } from 'node:crypto';
import type { PoolClient } from 'pg';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import type {
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';
import { quoteIdentifier, quoteTableName } from './postgres-identifiers.js';
import { checkRecordsTable } from './records-table-check.js';

interface ClaimRow {
  claimed: boolean;
  takeover: boolean | null;
  fingerprint: string | null;
  status: 'in_progress' | 'completed' | null;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | null;
  response_body: Buffer | null;
  expires_in: number | null;
}

/**
 * The claim's upsert sees the latest committed version of a conflicting row, but the read of the existing
 * row sees the statement's snapshot. When the two differ (a row inserted, taken over or released by an
 * attempt that committed after the snapshot was taken), the statement returns no row, and running it again,
 * with a new snapshot, resolves it.
 */
const CLAIM_ATTEMPTS = 5;

/** The record store on PostgreSQL, through the application's TypeORM data source. */
export class PostgresIdempotencyStore implements IdempotencyStore {
  private readonly claimSql: Statement;
  private readonly renewSql: Statement;
  private readonly completeSql: Statement;
  private readonly releaseSql: Statement;
  private readonly awaitSql: Statement;
  private readonly purgeSql: Statement;
  private readonly changes: ChangeListener;
  private readonly transactionSlots: Slots;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tableName: string,
  ) {
    const table = quoteTableName(tableName);
    // A fixed-length channel name: PostgreSQL's identifiers stop at 63 bytes.
    const channel = `idempotency_${createHash('md5').update(tableName).digest('hex').slice(0, 20)}`;
    // Each transactional run holds a pooled connection for as long as its handler runs, and so does the LISTEN
    // connection while it is open. Leaving two free keeps claims, finalizes and lease renewals flowing, and
    // stops transactions from starving each other of the connections their handlers need.
    const { extra, poolSize } = dataSource.options as { extra?: { max?: number }; poolSize?: number };
    this.transactionSlots = new Slots(Math.max(1, (extra?.max ?? poolSize ?? 10) - 2));
    this.changes = new ChangeListener(dataSource, channel, this.transactionSlots);
    const scope = 'account = $1 AND endpoint = $2 AND idempotency_key = $3';
    const held = `${scope} AND attempt = $4 AND status = 'in_progress'`;
    // Completing or releasing a claim wakes the attempts waiting for it (delivered when it commits), only when
    // one has asked to be: a NOTIFY serializes every notifying commit of the cluster on one lock.
    const notifying = (statement: string) =>
      countingRows(
        statement,
        `SELECT pg_notify('${channel}', md5($1 || chr(10) || $2 || chr(10) || $3)) WHERE changed.awaited`,
      );

    // One statement, one round trip. The record that holds the scope is read first: a replay, a conflict or a
    // reuse is answered from it without writing anything. Otherwise the key is claimed: a new record, or a
    // takeover of an expired one or of a lapsed lease of the same request.
    this.claimSql = prepared(`
      WITH current AS (
        SELECT fingerprint, status, response_status, response_headers, response_body,
               extract(epoch FROM expires_at - now())::float8 AS expires_in,
               expires_at > now() AND NOT (status = 'in_progress' AND locked_until <= now() AND fingerprint = $4) AS holds
        FROM ${table}
        WHERE ${scope}
      ),
      claimed AS (
        INSERT INTO ${table} AS r (account, endpoint, idempotency_key, fingerprint, status, attempt, attempts,
                                   created_at, locked_until, expires_at)
        SELECT $1, $2, $3, $4, 'in_progress', $5::uuid, 1, now(),
               now() + make_interval(secs => $6::float8), now() + make_interval(secs => $6::float8 + $7::float8)
        WHERE NOT EXISTS (SELECT 1 FROM current WHERE holds)
        ON CONFLICT (account, endpoint, idempotency_key) DO UPDATE SET
          fingerprint = EXCLUDED.fingerprint, status = 'in_progress', attempt = EXCLUDED.attempt,
          attempts = CASE WHEN r.status = 'in_progress' THEN r.attempts + 1 ELSE 1 END,
          created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at,
          completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL,
          awaited = r.awaited AND r.status = 'in_progress'
        WHERE r.expires_at <= now()
           OR (r.status = 'in_progress' AND r.locked_until <= now() AND r.fingerprint = EXCLUDED.fingerprint)
        RETURNING attempts > 1 AS takeover
      )
      SELECT true AS claimed, takeover, NULL::text AS fingerprint, NULL::text AS status,
             NULL::smallint AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body,
             NULL::float8 AS expires_in
      FROM claimed
      UNION ALL
      SELECT false, NULL, fingerprint, status, response_status, response_headers, response_body, expires_in
      FROM current
      WHERE holds AND NOT EXISTS (SELECT 1 FROM claimed)`);
    this.renewSql = prepared(
      countingRows(`
      UPDATE ${table}
      SET locked_until = now() + make_interval(secs => $5::float8),
          expires_at = now() + make_interval(secs => $5::float8 + $6::float8)
      WHERE ${held}
      RETURNING 1`),
    );
    // The clock at completion, not now(): in a transactional run, now() is when the handler's transaction began,
    // and a TTL counted from there would be shortened by the run (or over before the outcome is even stored).
    this.completeSql = prepared(
      notifying(`
      UPDATE ${table}
      SET status = 'completed', response_status = $5, response_headers = $6, response_body = $7,
          completed_at = completion.at, locked_until = NULL, expires_at = completion.at + make_interval(secs => $8::float8)
      FROM (SELECT clock_timestamp() AS at) AS completion
      WHERE ${held}
      RETURNING awaited`),
    );
    this.releaseSql = prepared(notifying(`DELETE FROM ${table} WHERE ${held} RETURNING awaited`));
    // Only while the lease holds: a lapsed one is for the waiter to take over, not to wait on.
    this.awaitSql = prepared(
      countingRows(`
      UPDATE ${table} SET awaited = true
      WHERE ${scope} AND status = 'in_progress' AND locked_until > now()
      RETURNING 1`),
    );
    // SKIP LOCKED keeps the purge off rows a claim is taking over right now.
    this.purgeSql = prepared(
      countingRows(`
      DELETE FROM ${table}
      WHERE ctid IN (SELECT ctid FROM ${table} WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)
        AND expires_at <= now()
      RETURNING 1`),
    );
  }

  async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
  ): Promise<ClaimResult> {
    for (let tries = 0; tries < CLAIM_ATTEMPTS; tries += 1) {
      const rows = await this.query<ClaimRow>(this.claimSql, [
        scope.account,
        scope.endpoint,
        scope.key,
        fingerprint,
        attempt,
        timing.leaseSeconds,
        timing.ttlSeconds,
      ]);
      const [row] = rows;
      if (!row) continue;
      if (row.claimed) return { claimed: true, takeover: row.takeover === true };
      return { claimed: false, existing: toExistingRecord(row) };
    }
    throw new Error(`Idempotency claim found neither a free nor a held record after ${CLAIM_ATTEMPTS} attempts`);
  }

  async renew({ scope, attempt }: IdempotencyClaim, timing: ClaimTiming): Promise<boolean> {
    const parameters = [scope.account, scope.endpoint, scope.key, attempt, timing.leaseSeconds, timing.ttlSeconds];
    return (await this.count(this.renewSql, parameters)) === 1;
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
    return (await this.count(this.completeSql, parameters, transaction)) === 1;
  }

  async release({ scope, attempt }: IdempotencyClaim): Promise<boolean> {
    return (await this.count(this.releaseSql, [scope.account, scope.endpoint, scope.key, attempt])) === 1;
  }

  async awaitOutcome(scope: IdempotencyScope): Promise<boolean> {
    return (await this.count(this.awaitSql, [scope.account, scope.endpoint, scope.key])) === 1;
  }

  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    return this.changes.wait(scopeDigest(scope), timeoutMs);
  }

  async beginTransaction(timeoutMs?: number): Promise<StoreTransaction> {
    await this.transactionSlots.acquire(timeoutMs);
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.connect();
      await runner.startTransaction();
    } catch (error) {
      await runner.release();
      this.transactionSlots.release();
      throw error;
    }
    return new QueryRunnerTransaction(runner, () => this.transactionSlots.release());
  }

  checkSchema(): Promise<void> {
    return checkRecordsTable(this.dataSource, this.tableName);
  }

  purgeExpired(batchSize: number): Promise<number> {
    return this.count(this.purgeSql, [batchSize]);
  }

  /** Stops listening for changes, giving the listening connection back to the pool. */
  async close(): Promise<void> {
    await this.changes.close();
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
      const runner = transaction.manager?.queryRunner;
      if (!runner) throw new Error('PostgresIdempotencyStore was given a transaction of another store');
      const client = (runner as QueryRunner & { databaseConnection: PoolClient }).databaseConnection;
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

class QueryRunnerTransaction implements StoreTransaction {
  private done = false;
  private lost = false;
  private readonly markLost = () => (this.lost = true);

  constructor(
    private readonly runner: QueryRunner,
    private readonly ended: () => void,
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

  abandon(): void {
    this.connection?.connection?.stream?.destroy();
  }

  private get connection(): (PoolClient & { connection?: { stream?: { destroy(): void } } }) | undefined {
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

/** A counting semaphore: at most `capacity` holders, the others wait in turn. */
class Slots {
  private readonly waiting: Array<() => void> = [];
  private free: number;

  constructor(readonly capacity: number) {
    this.free = capacity;
  }

  /** Rejects after `timeoutMs` without a slot; the acquirer then leaves the queue, so it never takes one later. */
  acquire(timeoutMs = Infinity): Promise<void> {
    if (this.free > 0) {
      this.free -= 1;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const granted = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = Number.isFinite(timeoutMs)
        ? setTimeout(() => {
            this.waiting.splice(this.waiting.indexOf(granted), 1);
            reject(new Error(`no connection slot became free within ${timeoutMs} ms`));
          }, timeoutMs)
        : undefined;
      this.waiting.push(granted);
    });
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free += 1;
  }
}

/**
 * One LISTEN connection per store, shared by every waiting attempt (no connection per waiter), opened on
 * the first wait. A lost connection is opened again by the next wait; waiters it leaves behind time out.
 * While it is open it holds one of the transaction slots, so that it never takes a connection kept free.
 */
class ChangeListener {
  private readonly waiters = new Map<string, Set<() => void>>();
  private connection?: Promise<{ runner: QueryRunner; freeSlot(): void }>;

  constructor(
    private readonly dataSource: DataSource,
    private readonly channel: string,
    private readonly slots: Slots,
  ) {}

  wait(digest: string, timeoutMs: number): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    let wake!: () => void;
    const changed = new Promise<void>((resolve) => (wake = resolve));
    const timer = setTimeout(() => done(), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      this.waiters.get(digest)?.delete(done);
      if (this.waiters.get(digest)?.size === 0) this.waiters.delete(digest);
      wake();
    };
    if (!this.waiters.has(digest)) this.waiters.set(digest, new Set());
    this.waiters.get(digest)?.add(done);
    // Without a listener (none could be opened before the waiter's timeout), the waiter still ends at its timeout.
    const listening = Promise.race([this.listen(timeoutMs), changed]).then(
      () => undefined,
      () => undefined,
    );
    return { changed, listening, cancel: done };
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    const listening = await connection?.catch(() => undefined);
    if (!listening) return;
    try {
      await listening.runner.query('UNLISTEN *').catch(() => undefined); // the connection goes back to the pool
      await listening.runner.release();
    } finally {
      listening.freeSlot();
    }
  }

  /** Opens the listening connection, waiting at most `timeoutMs` for its slot. */
  private listen(timeoutMs: number): Promise<unknown> {
    this.connection ??= (async () => {
      // With a single transaction slot (a pool of three or fewer), the listener takes a connection kept free
      // instead: holding that slot would leave transactional routes none at all.
      let slotHeld = this.slots.capacity > 1;
      if (slotHeld) await this.slots.acquire(timeoutMs);
      const freeSlot = () => {
        if (slotHeld) this.slots.release();
        slotHeld = false;
      };
      try {
        const runner = this.dataSource.createQueryRunner();
        const client = (await runner.connect()) as import('pg').PoolClient;
        const lost = () => {
          if (this.connection === connection) this.connection = undefined;
          freeSlot();
        };
        client.on('notification', (message) => {
          for (const waiter of [...(this.waiters.get(message.payload ?? '') ?? [])]) waiter();
        });
        client.on('error', lost);
        client.on('end', lost);
        await runner.query(`LISTEN ${quoteIdentifier(this.channel)}`);
        return { runner, freeSlot };
      } catch (error) {
        freeSlot();
        throw error;
      }
    })();
    const connection = this.connection;
    connection.catch(() => {
      if (this.connection === connection) this.connection = undefined;
    });
    return connection;
  }
}

/** The payload of a change notification: short, and the same on every instance. */
function scopeDigest(scope: IdempotencyScope): string {
  return createHash('md5').update(`${scope.account}\n${scope.endpoint}\n${scope.key}`).digest('hex');
}

interface Statement {
  name: string;
  text: string;
}

/** A statement with a name of its own (its text's digest), for PostgreSQL to prepare once per connection. */
function prepared(text: string): Statement {
  return { name: `idempotency_${createHash('md5').update(text).digest('hex').slice(0, 16)}`, text };
}

/**
 * Wraps a data-modifying statement so that it answers with the number of rows it changed, running `forEachRow`
 * (which may filter itself out) once per changed row.
 */
function countingRows(statement: string, forEachRow?: string): string {
  const each = forEachRow ? ` LEFT JOIN LATERAL (${forEachRow}) AS each_row ON true` : '';
  return `WITH changed AS (${statement}) SELECT count(*)::int AS count FROM changed${each}`;
}

function toExistingRecord(row: ClaimRow): ExistingRecord {
  if (row.status === 'completed') {
    return {
      status: 'completed',
      fingerprint: row.fingerprint as string,
      response: {
        status: row.response_status as number,
        headers: row.response_headers ?? {},
        body: row.response_body ?? Buffer.alloc(0),
      },
      expiresInSeconds: row.expires_in as number,
    };
  }
  return { status: 'in_progress', fingerprint: row.fingerprint as string };
}
