import type { DataSource } from 'typeorm';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import { DEFAULT_TABLE_NAME } from './postgres-options.js';
import { quoteTableName } from './postgres-identifiers.js';

/** The columns the store reads and writes, with their types as PostgreSQL names them (`format_type`). */
const EXPECTED_COLUMNS: Record<string, string> = {
  account: 'text',
  endpoint: 'text',
  idempotency_key: 'character varying',
  fingerprint: 'text',
  status: 'text',
  attempt: 'uuid',
  attempts: 'integer',
  awaited: 'boolean',
  lock_held: 'boolean',
  response_status: 'smallint',
  response_headers: 'jsonb',
  response_body: 'bytea',
  created_at: 'timestamp with time zone',
  locked_until: 'timestamp with time zone',
  completed_at: 'timestamp with time zone',
  expires_at: 'timestamp with time zone',
  steps: 'jsonb',
};

/** The claim's `ON CONFLICT` needs a unique index on exactly these columns: the single-flight lock. */
const SCOPE_COLUMNS = ['account', 'endpoint', 'idempotency_key'];

/**
 * Checks that `tableName` exists with the columns and the key the store relies on, so that a table that was never
 * created (or was created by an earlier version) stops the application at start-up with the fix, instead of
 * answering every idempotent request 503 "retry" forever.
 */
export async function checkRecordsTable(dataSource: DataSource, tableName: string): Promise<void> {
  const [table] = await dataSource.query<{ oid: number | null }[]>(`SELECT to_regclass($1)::oid AS oid`, [
    quoteTableName(tableName),
  ]);
  if (table.oid === null) {
    throw new IdempotencySetupError(
      `The idempotency table "${tableName}" does not exist in the database. ${howToCreate(tableName)}`,
    );
  }
  const columns = await dataSource.query<{ name: string; type: string }[]>(
    `SELECT attname AS name, format_type(atttypid, NULL) AS type
     FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`,
    [table.oid],
  );
  const typeOf = new Map(columns.map(({ name, type }) => [name, type]));
  const missing = Object.keys(EXPECTED_COLUMNS).filter((name) => !typeOf.has(name));
  if (missing.length > 0) {
    throw new IdempotencySetupError(
      `The idempotency table "${tableName}" lacks the column(s) ${missing.join(', ')}: it was created by an earlier ` +
        `version of nest-idempotency, or by hand. ${howToCreate(tableName)}`,
    );
  }
  const mistyped = Object.entries(EXPECTED_COLUMNS).filter(([name, type]) => typeOf.get(name) !== type);
  if (mistyped.length > 0) {
    const found = mistyped.map(([name, type]) => `${name} is ${typeOf.get(name)}, not ${type}`).join('; ');
    throw new IdempotencySetupError(
      `The idempotency table "${tableName}" has columns of other types (${found}). ${howToCreate(tableName)}`,
    );
  }
  const [key] = await dataSource.query<{ n: number }[]>(
    `SELECT count(*)::int AS n FROM pg_index i
     WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indnkeyatts = $2
       AND (SELECT array_agg(attname::text ORDER BY attname) FROM pg_attribute
            WHERE attrelid = i.indrelid AND attnum = ANY (i.indkey::int2[])) = $3::text[]`,
    [table.oid, SCOPE_COLUMNS.length, [...SCOPE_COLUMNS].sort()],
  );
  if (key.n === 0) {
    const columns = SCOPE_COLUMNS.join(', ');
    throw new IdempotencySetupError(
      `The idempotency table "${tableName}" has no primary key (or unique index) on (${columns}), which makes a ` +
        "key's claim atomic (a partial, deferrable or invalid one does not count: the claim's ON CONFLICT cannot use " +
        `it). Add it: \`ALTER TABLE ${quoteTableName(tableName)} ADD PRIMARY KEY (${columns})\`. ${howToCreate(tableName)}`,
    );
  }
}

function howToCreate(tableName: string): string {
  const migrations =
    tableName === DEFAULT_TABLE_NAME ? '`idempotencyMigrations()`' : `\`idempotencyMigrations('${tableName}')\``;
  return (
    `Create or update it with the package's migrations: add ${migrations} (from 'nest-idempotency/postgres') to your data ` +
    `source's \`migrations\` and set \`migrationsRun: true\`, or run them with the TypeORM CLI ` +
    `(\`npx typeorm migration:run -d <your data source file>\`). See docs/records-table.md in the repository.`
  );
}
