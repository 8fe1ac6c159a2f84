import type { Response } from 'supertest';
import type { TestRecords } from './test-app.js';
import type { TestDatabase } from './test-database.js';
import { waitFor } from './wait-for.js';

/** A row per run of a handler, by the request's key: how a test counts the runs. */
export const WORK_LOG = 'CREATE TABLE work_log (id serial PRIMARY KEY, key text NOT NULL)';

/** A handler that inserts (1), (1) here fails at commit only: its constraint is deferred. */
export const CHECKED_AT_COMMIT =
  'CREATE TABLE checked_at_commit (v int, CONSTRAINT checked_at_commit_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)';

/**
 * Where the helpers read the records and the rows: the file's database (the records table of an app on PostgreSQL
 * among its tables), or an app's records on whichever store (`recordsOf`), the rows on its `db`.
 */
export type RowsAndRecords = TestDatabase | TestRecords;

const rowsIn = (at: RowsAndRecords): TestDatabase => ('statusOf' in at ? at.db : at);

/** The rows the runs for `key` wrote, oldest first. */
export const workRowsOf = (db: RowsAndRecords, key: string) =>
  rowsIn(db).query<{ id: number }>('SELECT id FROM work_log WHERE key = $1 ORDER BY id', [key]);

/** The status of the record of `key`, if there is one. */
export const statusOf = async (db: RowsAndRecords, key: string) =>
  'statusOf' in db
    ? db.statusOf(key)
    : (
        await db.query<{ status: string }>('SELECT status FROM idempotency_records WHERE idempotency_key = $1', [key])
      )[0]?.status;

/** Waits until the outcome of `key` is stored. */
export const outcomeStored = (db: RowsAndRecords, key: string) =>
  waitFor(async () => ((await statusOf(db, key)) === 'completed' ? true : undefined), 'the outcome to be stored');

/**
 * Once the outcome of `key` is stored, `retry` (a request with `key`) answers 201 with the row of the one run that
 * wrote (and `body` besides), and runs nothing again.
 */
export async function expectOneRunReplayed(
  db: RowsAndRecords,
  key: string,
  retry: () => Promise<Response>,
  body: object = {},
): Promise<void> {
  await outcomeStored(db, key);
  const [row] = await workRowsOf(db, key);
  await expect(retry()).resolves.toMatchObject({ status: 201, body: { ...body, id: row.id } });
  await expect(workRowsOf(db, key)).resolves.toHaveLength(1);
}

/**
 * Once the outcome of `key` is stored: one run wrote its row, and `retry` answers 201 as a replay of that row.
 * Returns the replay, for what a test checks besides.
 */
export async function expectReplayOfOneRun(
  db: RowsAndRecords,
  key: string,
  retry: () => Promise<Response>,
): Promise<Response> {
  await outcomeStored(db, key);
  const rows = await workRowsOf(db, key);
  expect(rows).toHaveLength(1);
  const replay = await retry();
  expect(replay.status).toBe(201);
  expect(replay.headers['idempotent-replay']).toBe('true');
  expect(replay.body).toEqual({ id: rows[0].id });
  return replay;
}

/** `response` refused a run whose commit failed (`checked_at_commit`'s check): a 503 to retry, and nothing kept. */
export async function expectRefusedKeepingNothing(db: TestDatabase, key: string, response: Response): Promise<void> {
  expect(response.body).toMatchObject({ error: 'idempotency_store_unavailable' });
  expect(response.headers['retry-after']).toBe('2');
  await expect(db.query('SELECT count(*)::int AS n FROM checked_at_commit')).resolves.toEqual([{ n: 0 }]);
  await expect(statusOf(db, key)).resolves.toBeUndefined();
}
