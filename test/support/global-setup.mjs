import { mkdtempSync } from 'node:fs';
import { register } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The newcomer's path: no DATABASE_URL, so the suite runs on an embedded PostgreSQL it starts and stops. */
export default async function globalSetup() {
  if (process.env.DATABASE_URL) return;
  // Global setup runs outside Jest's transforms: load the TypeScript helper through the project's loader.
  register('../../scripts/ts-loader.mjs', import.meta.url);
  const { freePort, startEmbeddedDatabase } = await import('../../sample-app/embedded-database.ts');
  // A fresh folder under the system temp dir, which the unprivileged postgres user can reach even as root.
  const dataDir = mkdtempSync(join(tmpdir(), 'idempotency-test-pg-'));
  const database = await startEmbeddedDatabase(dataDir, await freePort(), false);
  process.env.DATABASE_URL = database.url;
  // The pooler suites (test/support/pgbouncer.ts) skip on it: PgBouncer fronts a server, not this one.
  process.env.IDEMPOTENCY_TEST_EMBEDDED_DATABASE = 'true';
  globalThis.embeddedDatabase = database;
}
