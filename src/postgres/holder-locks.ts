import { createHash } from 'node:crypto';
import type { PoolClient, QueryResult } from 'pg';
import type { QueryRunner } from 'typeorm';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';

/**
 * The key of the transaction-level advisory lock a transactional attempt holds on its scope while its transaction is
 * open: a signed 64-bit integer (as text) from the table and the scope. Two scopes that share a key only make a lock or
 * a taker's probe fail, and their claims fall back to the lease.
 */
export function scopeLockKey(tableName: string, scope: IdempotencyScope): string {
  const digest = createHash('sha256').update(JSON.stringify([tableName, scope.account, scope.endpoint, scope.key]));
  return digest.digest().readBigInt64BE(0).toString();
}

/**
 * Starts the runner's transaction and tries its scope's lock in the same round trip: TypeORM's `startTransaction()`
 * (its state and its transaction events, as ever), whose `START TRANSACTION` goes out with the lock's `SELECT` in one
 * simple query. Resolves whether the lock was taken; false too if TypeORM ever stops sending that statement.
 */
export async function startTransactionLocking(runner: QueryRunner, lockKey: string): Promise<boolean> {
  const client = (runner as QueryRunner & { databaseConnection: PoolClient }).databaseConnection;
  const literal = `'${BigInt(lockKey)}'::bigint`; // a number, quoted: the smallest bigint has no unquoted literal
  const query = runner.query.bind(runner);
  let locked = false;
  runner.query = (async (text: string, ...rest: unknown[]): Promise<unknown> => {
    if (text !== 'START TRANSACTION') return query(text, ...(rest as []));
    const results = (await client.query(
      `START TRANSACTION; SELECT pg_try_advisory_xact_lock(${literal}) AS locked`,
    )) as unknown as QueryResult<{ locked: boolean }>[];
    locked = results[1].rows[0].locked;
  }) as QueryRunner['query'];
  try {
    await runner.startTransaction();
  } finally {
    delete (runner as Partial<QueryRunner>).query; // the prototype's again
  }
  return locked;
}
