import pg from 'pg';

/** A lock held by a connection of the test's, in an open transaction, until it is let go. */
export interface HeldLock {
  /** Rolls the transaction back and closes its connection; a later call (a `finally`'s) waits for the same. */
  letGo(): Promise<void>;
}

/** Runs `sql` (a `LOCK TABLE` or `SELECT … FOR UPDATE`) in a transaction of its own on `url`, and keeps it open. */
export async function holdLock(url: string, sql: string, params: unknown[] = []): Promise<HeldLock> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query('BEGIN');
  await client.query(sql, params);
  let released: Promise<void> | undefined;
  return {
    letGo: () => (released ??= client.query('ROLLBACK').then(() => client.end())),
  };
}
