import pg from 'pg';
import type { TestDatabase } from './test-database.js';

/** A lock held by a connection of the test's, in an open transaction, until it is let go. */
export interface HeldLock {
  /** Rolls the transaction back and closes its connection; a later call (a `finally`'s) waits for the same. */
  letGo(): Promise<void>;
  /** Commits the transaction and closes its connection; `letGo` after it waits for the same. */
  commit(): Promise<void>;
}

/** Runs `sql` (a `LOCK TABLE` or `SELECT … FOR UPDATE`) in a transaction of its own on `url`, and keeps it open. */
export async function holdLock(url: string, sql: string, params: unknown[] = []): Promise<HeldLock> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query('BEGIN');
  await client.query(sql, params);
  let released: Promise<void> | undefined;
  const end = (statement: string) => (released ??= client.query(statement).then(() => client.end()));
  return { letGo: () => end('ROLLBACK'), commit: () => end('COMMIT') };
}

/**
 * A probe for `waitFor`: a session of `db` waits for a lock while it runs a statement `LIKE pattern`
 * (`'INSERT INTO "charges"%'`). Resolves to a row once one does, else to undefined.
 */
export function waitingForLock(db: TestDatabase, pattern: string): () => Promise<unknown> {
  return async () =>
    (
      await db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
        [pattern],
      )
    )[0];
}
