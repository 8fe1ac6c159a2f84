import type { DataSource } from 'typeorm';
import type {
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
} from './idempotency-store.interface.js';

/** Quotes a table name, optionally schema-qualified, as a PostgreSQL identifier. */
export function quoteTableName(tableName: string): string {
  return tableName
    .split('.')
    .map((part) => `"${part.replace(/"/g, '""')}"`)
    .join('.');
}

interface ClaimRow {
  claimed: boolean;
  fingerprint: string | null;
  status: 'in_progress' | 'completed' | null;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | null;
  response_body: Buffer | null;
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
  private readonly claimSql: string;
  private readonly completeSql: string;
  private readonly releaseSql: string;
  private readonly purgeSql: string;

  constructor(
    private readonly dataSource: DataSource,
    tableName: string,
  ) {
    const table = quoteTableName(tableName);
    const scope = 'account = $1 AND endpoint = $2 AND idempotency_key = $3';
    // One statement, one round trip: claim a new key, or take over an expired record or a lapsed lease
    // of the same request; otherwise return the record that holds the scope.
    this.claimSql = `
      WITH claimed AS (
        INSERT INTO ${table} AS r (account, endpoint, idempotency_key, fingerprint, status, attempt,
                                   created_at, locked_until, expires_at)
        VALUES ($1, $2, $3, $4, 'in_progress', $5, now(),
                now() + make_interval(secs => $6::float8), now() + make_interval(secs => $6::float8 + $7::float8))
        ON CONFLICT (account, endpoint, idempotency_key) DO UPDATE SET
          fingerprint = EXCLUDED.fingerprint, status = 'in_progress', attempt = EXCLUDED.attempt,
          created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at,
          completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL
        WHERE r.expires_at <= now()
           OR (r.status = 'in_progress' AND r.locked_until <= now() AND r.fingerprint = EXCLUDED.fingerprint)
        RETURNING 1
      )
      SELECT true AS claimed, NULL::text AS fingerprint, NULL::text AS status, NULL::smallint AS response_status,
             NULL::jsonb AS response_headers, NULL::bytea AS response_body
      FROM claimed
      UNION ALL
      SELECT false, fingerprint, status, response_status, response_headers, response_body
      FROM ${table}
      WHERE ${scope} AND NOT EXISTS (SELECT 1 FROM claimed)
        -- A version the claim above could have taken is older than the one it saw: ask again.
        AND expires_at > now()
        AND NOT (status = 'in_progress' AND locked_until <= now() AND fingerprint = $4)`;
    this.completeSql = countingRows(`
      UPDATE ${table}
      SET status = 'completed', response_status = $5, response_headers = $6, response_body = $7,
          completed_at = now(), locked_until = NULL, expires_at = now() + make_interval(secs => $8::float8)
      WHERE ${scope} AND attempt = $4 AND status = 'in_progress'
      RETURNING 1`);
    this.releaseSql = countingRows(`DELETE FROM ${table} WHERE ${scope} AND attempt = $4 AND status = 'in_progress' RETURNING 1`);
    // SKIP LOCKED keeps the purge off rows a claim is taking over right now.
    this.purgeSql = countingRows(`
      DELETE FROM ${table}
      WHERE ctid IN (SELECT ctid FROM ${table} WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED)
        AND expires_at <= now()
      RETURNING 1`);
  }

  async claim(scope: IdempotencyScope, fingerprint: string, attempt: string, timing: ClaimTiming): Promise<ClaimResult> {
    for (let tries = 0; tries < CLAIM_ATTEMPTS; tries += 1) {
      const rows: ClaimRow[] = await this.dataSource.query(this.claimSql, [
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
      if (row.claimed) return { claimed: true };
      return { claimed: false, existing: toExistingRecord(row) };
    }
    throw new Error(`Idempotency claim found neither a free nor a held record after ${CLAIM_ATTEMPTS} attempts`);
  }

  async complete(claim: IdempotencyClaim, response: StoredResponse, ttlSeconds: number): Promise<boolean> {
    const { scope, attempt } = claim;
    const completed = await this.count(this.completeSql, [
      scope.account,
      scope.endpoint,
      scope.key,
      attempt,
      response.status,
      JSON.stringify(response.headers),
      response.body,
      ttlSeconds,
    ]);
    return completed === 1;
  }

  async release(claim: IdempotencyClaim): Promise<boolean> {
    const { scope, attempt } = claim;
    return (await this.count(this.releaseSql, [scope.account, scope.endpoint, scope.key, attempt])) === 1;
  }

  purgeExpired(batchSize: number): Promise<number> {
    return this.count(this.purgeSql, [batchSize]);
  }

  private async count(sql: string, parameters: unknown[]): Promise<number> {
    const [{ count }]: Array<{ count: number }> = await this.dataSource.query(sql, parameters);
    return count;
  }
}

/** Wraps a data-modifying statement so that it answers with the number of rows it changed. */
function countingRows(statement: string): string {
  return `WITH changed AS (${statement}) SELECT count(*)::int AS count FROM changed`;
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
    };
  }
  return { status: 'in_progress', fingerprint: row.fingerprint as string };
}
