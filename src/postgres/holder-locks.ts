import { createHash } from 'node:crypto';
import type { PoolClient, QueryResult } from 'pg';
import type { QueryRunner } from 'typeorm';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';

/**
 * The key of the transaction-level advisory lock a transactional attempt holds on its scope while its transaction is
 * open: a signed 64-bit integer (as text) from the table's identity (its OID, so that every spelling of one table,
 * `idempotency_records` or `public.idempotency_records`, locks alike) and the scope. Two scopes that share a key only
 * make a lock or a taker's probe fail, and their claims fall back to the lease.
 */
export function scopeLockKey(tableOid: string, scope: IdempotencyScope): string {
  const digest = createHash('sha256').update(JSON.stringify([tableOid, scope.account, scope.endpoint, scope.key]));
  return digest.digest().readBigInt64BE(0).toString();
}

/** What a holder transaction found as it started. */
export interface HolderOpening {
  /**
   * Its virtual transaction id and backend pid (`LOCKED_BY`) if it took the scope's lock: a claim checks in `pg_locks`
   * that this very transaction still holds the lock, never a flag set before the claim reached the server.
   */
  lockedBy?: string;
  /**
   * False when its isolation is above read committed. Its first statement (the lock's) then fixed its snapshot before
   * the claim committed, so its outcome would match no record: such a transaction cannot hold a claim.
   */
  readCommitted: boolean;
}

/**
 * Starts the runner's transaction and tries its scope's lock in the same round trip: TypeORM's `startTransaction()`
 * (its state and its transaction events, as ever), whose `START TRANSACTION` is held back until TypeORM's own
 * statements of the start are known. A `SET TRANSACTION ISOLATION LEVEL` (the data source's `isolationLevel`) must
 * come before any query of the transaction, so it goes out between the `START` and the lock's `SELECT`, all in one
 * simple query; without one, the `START` and the lock go out before the next statement, or when `startTransaction()`
 * is done. The lock is taken only under read committed. If TypeORM ever stops sending `START TRANSACTION`, the opening
 * says neither locked nor read committed, and the transaction is not used as a holder.
 */
export async function startTransactionLocking(runner: QueryRunner, lockKey: string): Promise<HolderOpening> {
  const client = (runner as QueryRunner & { databaseConnection: PoolClient }).databaseConnection;
  const query = runner.query.bind(runner);
  let startHeldBack = false;
  let opening: HolderOpening | undefined;
  const startLocking = async (isolation?: string): Promise<void> => {
    startHeldBack = false;
    const statements = ['START TRANSACTION', ...(isolation === undefined ? [] : [isolation]), lockingSelect(lockKey)];
    const results = (await client.query(statements.join('; '))) as unknown as QueryResult<LockingRow>[];
    const [row] = results[results.length - 1].rows;
    opening = { readCommitted: row.read_committed, ...(row.locked_by === null ? {} : { lockedBy: row.locked_by }) };
  };
  runner.query = (async (text: string, ...rest: unknown[]): Promise<unknown> => {
    if (text === 'START TRANSACTION' && opening === undefined && !startHeldBack) {
      startHeldBack = true;
      return undefined;
    }
    if (startHeldBack && text.startsWith('SET TRANSACTION ISOLATION LEVEL ')) return startLocking(text);
    if (startHeldBack) await startLocking();
    return query(text, ...(rest as []));
  }) as QueryRunner['query'];
  try {
    await runner.startTransaction();
    if (startHeldBack) await startLocking();
  } finally {
    delete (runner as Partial<QueryRunner>).query; // the prototype's again
  }
  return opening ?? { readCommitted: false };
}

interface LockingRow {
  read_committed: boolean;
  locked_by: string | null;
}

/**
 * Who holds a lock, as a row of `pg_locks` says: its virtual transaction id and its backend's pid. The id alone is a
 * backend's slot and a counter, both restarted with the server, so a transaction after a restart could carry the id
 * of one lost in it; with the pid it names one transaction.
 */
export const LOCKED_BY = `virtualtransaction || '@' || pid`;

/** PostgreSQL runs read uncommitted as read committed. */
const READ_COMMITTED = `current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')`;

function lockingSelect(lockKey: string): string {
  const literal = `'${BigInt(lockKey)}'::bigint`; // a number, quoted: the smallest bigint has no unquoted literal
  return `SELECT ${READ_COMMITTED} AS read_committed,
    CASE WHEN ${READ_COMMITTED} AND pg_try_advisory_xact_lock(${literal})
      THEN (SELECT ${LOCKED_BY} FROM pg_locks WHERE locktype = 'virtualxid' AND pid = pg_backend_pid())
    END AS locked_by`;
}
