import pg from 'pg';
import { sharedBackend } from '../../src/postgres/transaction-pooler.js';

/**
 * PgBouncer in transaction mode in front of the suite's PostgreSQL server, at `PGBOUNCER_URL`
 * (`scripts/start-pgbouncer.sh` starts one and prints its URL), for the suites that run through it. Where it is
 * missing they are skipped, saying why; under `CI=true` on a PostgreSQL server a missing pooler fails the file
 * instead, so that a green CI run means they ran.
 */
export type PgBouncer = { url: string; skipped?: never } | { url?: never; skipped: string };

export const pgbouncer: PgBouncer = await findPgBouncer();

/** `describe`, skipped (with the reason in its name) where PgBouncer is missing. */
export function describeThroughPgBouncer(name: string, body: () => void): void {
  if (pgbouncer.skipped === undefined) describe(name, body);
  else describe.skip(`${name} (skipped: ${pgbouncer.skipped})`, body);
}

/** `url` (a database of the suite's server) reached through PgBouncer: its wildcard entry forwards it by name. */
export function throughPgBouncer(url: string): string {
  if (pgbouncer.url === undefined) throw new Error(`PgBouncer is missing: ${pgbouncer.skipped}`);
  const pooled = new URL(url);
  const pooler = new URL(pgbouncer.url);
  pooled.host = pooler.host;
  return pooled.toString();
}

async function findPgBouncer(): Promise<PgBouncer> {
  const missing = await whyMissing();
  if (missing === undefined) return { url: process.env.PGBOUNCER_URL as string };
  if (process.env.CI === 'true' && !process.env.IDEMPOTENCY_TEST_EMBEDDED_DATABASE) {
    throw new Error(`The suites through PgBouncer must run in CI, and cannot: ${missing}`);
  }
  console.warn(`The suites through PgBouncer are skipped: ${missing}`);
  return { skipped: missing };
}

async function whyMissing(): Promise<string | undefined> {
  if (process.env.IDEMPOTENCY_TEST_EMBEDDED_DATABASE) {
    return 'the suite runs on the embedded PostgreSQL (DATABASE_URL unset), which no PgBouncer fronts';
  }
  const url = process.env.PGBOUNCER_URL;
  if (!url) return 'PGBOUNCER_URL is not set (scripts/start-pgbouncer.sh starts PgBouncer and prints it)';
  // The suites show what a transaction pooler breaks: a pooler that keeps each client on its own server connection
  // (session mode, or no pooler at all) would pass them without showing anything.
  try {
    const backend = await sharedBackend(pg.Client, { connectionString: url, connectionTimeoutMillis: 5_000 });
    if (backend === undefined) return `PGBOUNCER_URL (${url}) gives each session a server connection of its own`;
    return undefined;
  } catch (error) {
    return `PGBOUNCER_URL (${url}) cannot be reached: ${(error as Error).message}`;
  }
}
