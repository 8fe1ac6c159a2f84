import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import pg from 'pg';
import { madeBeforeAll } from './made-before-all.js';

/** A database of its own for one test file, on the server of DATABASE_URL. */
export interface TestDatabase {
  url: string;
  query<Row = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<Row[]>;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const serverUrl = process.env.DATABASE_URL;
  if (!serverUrl) throw new Error('DATABASE_URL is not set: run the tests through jest, whose global setup sets it');
  const name = `idempotency_test_${testFileTag()}${randomBytes(6).toString('hex')}`;
  await withClient(serverUrl, (client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  // An idle connection can be cut under the test (a database dropped or a session terminated by another test):
  // the pool replaces it; without a listener its 'error' event would fail whichever test is running.
  pool.on('error', () => undefined);
  return {
    url: url.toString(),
    query: async <Row>(sql: string, params?: unknown[]) => (await pool.query(sql, params)).rows as Row[],
    drop: async () => {
      await pool.end();
      await withClient(serverUrl, (client) => client.query(`DROP DATABASE ${name} WITH (FORCE)`));
    },
  };
}

/**
 * The running test file's name as a database name's part (`concurrency_e2e_`), so that the server's sessions and a
 * database left behind say which file they belong to; empty outside Jest (the bench).
 */
function testFileTag(): string {
  const testPath = (globalThis as { expect?: { getState(): { testPath?: string } } }).expect?.getState().testPath;
  if (!testPath) return '';
  return `${basename(testPath, '.spec.ts')
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, 30)}_`;
}

/**
 * The test file's database: created before its tests, `setup`'s statements run on it in order (the spec's own
 * tables), and dropped after them. Declare it first, so that the file's other hooks find it made.
 */
export function useTestDatabase(...setup: string[]): TestDatabase {
  return madeBeforeAll(
    async () => {
      const db = await createTestDatabase();
      for (const statement of setup) await db.query(statement);
      return db;
    },
    (db) => db.drop(),
  );
}

/** How many records of `db`'s records table have `key` (0 or 1 in one scope). */
export async function recordCountOf(db: TestDatabase, key: string): Promise<number> {
  const [{ n }] = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM idempotency_records WHERE idempotency_key = $1',
    [key],
  );
  return n;
}

async function withClient<T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
}
