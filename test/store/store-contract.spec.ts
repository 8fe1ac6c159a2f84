import { DataSource } from 'typeorm';
import { InMemoryIdempotencyStore } from '../../src/index.js';
import { idempotencyMigrations, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { describeIdempotencyStoreContract } from '../../src/testing/index.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

// The contract every store passes, run against ours through the exported kit: PostgreSQL (real time, short leases),
// and the in-memory store on a fake clock and on the real one.

let db: TestDatabase | undefined;
let dataSource: DataSource | undefined;

afterAll(async () => {
  await dataSource?.destroy();
  await db?.drop();
});

describeIdempotencyStoreContract('PostgresIdempotencyStore', async () => {
  if (!dataSource) {
    db = await createTestDatabase();
    dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: idempotencyMigrations() });
    await dataSource.initialize();
    await dataSource.runMigrations();
  }
  const store = new PostgresIdempotencyStore(dataSource, 'idempotency_records');
  return { store, cleanup: () => store.close() };
});

describeIdempotencyStoreContract('InMemoryIdempotencyStore on a fake clock', async () => {
  let now = Date.parse('2030-01-01T00:00:00Z');
  return {
    store: new InMemoryIdempotencyStore({ now: () => now }),
    advanceTime: (seconds) => void (now += seconds * 1000),
  };
});

describeIdempotencyStoreContract('InMemoryIdempotencyStore on the real clock', async () => ({
  store: new InMemoryIdempotencyStore(),
}));
