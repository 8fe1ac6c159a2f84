import { ExpiredRecordsPurge } from '../protocol/expired-records-purge.js';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import {
  type IdempotencyOperations,
  OPERATOR_DEFAULT_LIMIT,
  type OperatorReadOptions,
  type OperatorRecord,
  type OperatorRecordMatch,
  type OperatorRecordState,
  type OperatorReleaseResult,
  type OperatorStateCounts,
  releaseResult,
} from '../store-kit/operator-records.js';
import { scopeLockKey } from './holder-locks.js';
import { DEFAULT_TABLE_NAME } from './postgres-options.js';
import { quoteTableName } from './postgres-identifiers.js';
import { changeChannel, type RecordStatements, recordStatements } from './record-statements.js';

/**
 * Runs one statement and answers its rows: `(text, values) => dataSource.query(text, values)` in an application,
 * `async (text, values) => (await client.query(text, values)).rows` on a `pg` client.
 */
export type OperatorQuery = (text: string, values: unknown[]) => Promise<Record<string, unknown>[]>;

// The steps' names only (a JSON array of strings, in order): their results may be sealed, or sensitive.
const COLUMNS = `account, endpoint, idempotency_key, status, attempt::text AS attempt, attempts, lock_held, awaited,
  created_at, locked_until, completed_at, expires_at, response_status, octet_length(response_body) AS body_bytes,
  COALESCE(jsonb_path_query_array(steps, '$[*].name'), '[]'::jsonb) AS step_names,
  CASE WHEN expires_at <= now() THEN 'expired' WHEN status = 'completed' THEN 'completed'
       WHEN locked_until <= now() THEN 'lease-lapsed' ELSE 'running' END AS state`;

/**
 * An operator's look at the PostgreSQL records table and what an operator may do to it: look up a key, list the keys
 * stuck in progress, release one (fenced on the attempt the operator saw), purge expired records. Constructed on a
 * plain query function, so that the command-line tool uses it on a `pg` client, and provided by
 * `IdempotencyPostgresModule` on the application's data source. Statements go out unnamed (no prepared statement left
 * on a pooled connection).
 */
export class IdempotencyOperator implements IdempotencyOperations {
  private readonly table: string;
  private readonly statements: RecordStatements;

  constructor(
    private readonly query: OperatorQuery,
    /** The records table, optionally schema-qualified. Default `idempotency_records`. */
    private readonly tableName: string = DEFAULT_TABLE_NAME,
  ) {
    this.table = quoteTableName(tableName);
    this.statements = recordStatements(tableName, changeChannel(tableName));
  }

  /** The record of one scope, or `undefined`. */
  async inspect(
    scope: IdempotencyScope,
    options: Pick<OperatorReadOptions, 'body'> = {},
  ): Promise<OperatorRecord | undefined> {
    const [record] = await this.find(scope, { ...options, limit: 1 });
    return record;
  }

  /** The records of a key, across accounts and endpoints unless the match names them, most recent first. */
  async find(match: OperatorRecordMatch, options: OperatorReadOptions = {}): Promise<OperatorRecord[]> {
    const rows = await this.query(
      `SELECT ${COLUMNS}${options.body ? ', response_body' : ''} FROM ${this.table}
       WHERE idempotency_key = $1 AND ($2::text IS NULL OR account = $2) AND ($3::text IS NULL OR endpoint = $3)
       ORDER BY created_at DESC LIMIT $4`,
      [match.key, match.account ?? null, match.endpoint ?? null, options.limit ?? OPERATOR_DEFAULT_LIMIT],
    );
    return this.withHolders(rows.map(toRecord));
  }

  /**
   * The records in progress that no live attempt holds: past their lease (`lease-lapsed`), or claimed by a
   * transactional attempt whose transaction has ended (`holder-gone`), oldest first. A record whose attempt still runs
   * past its lease (a handler slower than its lease, its renewals failing) is listed too: nothing in the table tells
   * it from a dead one.
   */
  async stuck(options: Pick<OperatorReadOptions, 'limit'> = {}): Promise<OperatorRecord[]> {
    const limit = options.limit ?? OPERATOR_DEFAULT_LIMIT;
    const stuck: OperatorRecord[] = [];
    // Read a page at a time: whether a holder transaction lives is known only after reading its record, so the limit
    // counts the stuck records found, never the live ones read before them. `attempts > 0` (true of every record) lets
    // it read the in-progress records' index (`<table>_in_progress_idx`), not the whole table.
    for (let offset = 0; stuck.length < limit; offset += limit) {
      const rows = await this.query(
        `SELECT ${COLUMNS} FROM ${this.table}
         WHERE status = 'in_progress' AND attempts > 0 AND (locked_until <= now() OR lock_held)
         ORDER BY created_at, account, endpoint, idempotency_key LIMIT $1 OFFSET $2`,
        [limit, offset],
      );
      stuck.push(...(await this.withHolders(rows.map(toRecord))).filter((record) => record.state !== 'running'));
      if (rows.length < limit) break;
    }
    return stuck.slice(0, limit);
  }

  /** The records of one state, most recent first (`stuck()` for those in progress that no live attempt holds). */
  async list(
    state: Exclude<OperatorRecordState, 'holder-gone'>,
    options: OperatorReadOptions = {},
  ): Promise<OperatorRecord[]> {
    const rows = await this.query(
      `SELECT * FROM (SELECT ${COLUMNS}${options.body ? ', response_body' : ''} FROM ${this.table}) AS records
       WHERE state = $1 ORDER BY created_at DESC LIMIT $2`,
      [state, options.limit ?? OPERATOR_DEFAULT_LIMIT],
    );
    return this.withHolders(rows.map(toRecord));
  }

  /** How many records stand in each state, in one scan of the table. */
  async countByState(): Promise<OperatorStateCounts> {
    const counts: OperatorStateCounts = { running: 0, 'lease-lapsed': 0, completed: 0, expired: 0 };
    const rows = await this.query(
      `SELECT state, count(*)::int AS count FROM (SELECT ${COLUMNS} FROM ${this.table}) AS records GROUP BY state`,
      [],
    );
    for (const row of rows) counts[row.state as keyof OperatorStateCounts] = row.count as number;
    return counts;
  }

  /**
   * Deletes the in-progress record of `scope` if `attempt` still holds it, steps and all, in one statement that wakes
   * the attempts waiting for it, as the store's release does (which, unlike this one, keeps a record with steps for its
   * request to resume); a completed record is never released. A record released with its steps has the token its
   * release gave it, as `inspect()` shows. When nothing was deleted, the record is read again to say why.
   */
  async release(scope: IdempotencyScope, attempt: string): Promise<OperatorReleaseResult> {
    // Every record here has a token, a UUID: '' holds none of them (and the uuid column would refuse it, as a fault).
    if (attempt === '') return releaseResult(false, () => this.inspect(scope));
    const [{ count }] = await this.query(this.statements.discard.text, [
      scope.account,
      scope.endpoint,
      scope.key,
      attempt,
    ]);
    return releaseResult(count === 1, () => this.inspect(scope));
  }

  /** Deletes every expired record now, in batches of `batchSize` (default 1000, the module's `purgeBatchSize`). */
  purgeExpired(batchSize = 1000): Promise<number> {
    const store = {
      purgeExpired: async (size: number) => (await this.query(this.statements.purge.text, [size]))[0].count as number,
    };
    return new ExpiredRecordsPurge(store, batchSize).purge();
  }

  /**
   * Marks `holder-gone` the records within their lease whose holder transaction has ended: the scope's advisory lock
   * (holder-locks.ts) is no longer held in this database, which is how a claim finds them free. Read in `pg_locks`,
   * never by taking the lock, which would stand in a live holder's way.
   */
  private async withHolders(records: OperatorRecord[]): Promise<OperatorRecord[]> {
    const probed = records.filter((record) => record.state === 'running' && record.holderTransaction);
    if (probed.length === 0) return records;
    const [{ oid }] = await this.query('SELECT to_regclass($1)::oid::text AS oid', [this.table]);
    const keys = probed.map((record) => scopeLockKey(oid as string, scopeOf(record)));
    const held = await this.query(
      `SELECT key::text FROM unnest($1::bigint[]) AS key
       WHERE EXISTS (SELECT 1 FROM pg_locks
         WHERE locktype = 'advisory' AND granted AND objsubid = 1
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND classid = ((key >> 32) & 4294967295)::oid AND objid = (key & 4294967295)::oid)`,
      [keys],
    );
    const heldKeys = new Set(held.map((row) => row.key as string));
    probed.forEach((record, index) => {
      if (!heldKeys.has(keys[index])) record.state = 'holder-gone';
    });
    return records;
  }
}

function scopeOf(record: OperatorRecord): IdempotencyScope {
  return { account: record.account, endpoint: record.endpoint, key: record.key };
}

function toRecord(row: Record<string, unknown>): OperatorRecord {
  return {
    account: row.account as string,
    endpoint: row.endpoint as string,
    key: row.idempotency_key as string,
    state: row.state as OperatorRecordState,
    status: row.status as OperatorRecord['status'],
    attempt: row.attempt as string,
    attempts: row.attempts as number,
    holderTransaction: row.lock_held as boolean,
    awaited: row.awaited as boolean,
    createdAt: row.created_at as Date,
    leaseUntil: row.locked_until as Date | null,
    completedAt: row.completed_at as Date | null,
    expiresAt: row.expires_at as Date,
    responseStatus: row.response_status as number | null,
    bodyBytes: row.body_bytes as number | null,
    steps: row.step_names as string[],
    ...(row.response_body === undefined || row.response_body === null ? {} : { body: row.response_body as Buffer }),
  };
}
