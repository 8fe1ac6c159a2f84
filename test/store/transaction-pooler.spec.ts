import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { IdempotencySetupError } from '../../src/index.js';
import { idempotencyMigrations, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { describeIdempotencyStoreContract } from '../../src/testing/index.js';
import { describeThroughPgBouncer, throughPgBouncer } from '../support/pgbouncer.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

// The PostgreSQL store behind PgBouncer 1.18 in transaction mode (PGBOUNCER_URL): the store contract with
// `transactionPooler: true` (waits polling the record, and LISTENing on a connection straight to PostgreSQL), what
// goes wrong without it (and is refused at start-up, or named in the error), and a transaction that stays on one
// server connection for its whole length.

const LONG = { leaseSeconds: 60, ttlSeconds: 3600 };
/** Behind a pooler the store opens no holder transactions (`beginHoldingTransaction`'s comment says why). */
const POOLED_STORES = { holderTransactions: false };
const response = { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') };

let db: TestDatabase | undefined;
/** The test database reached through PgBouncer, and straight. */
let pooled: DataSource | undefined;
let direct: DataSource | undefined;

async function pooledDataSource(): Promise<DataSource> {
  if (!pooled) {
    db = await createTestDatabase();
    await db.query('CREATE TABLE ledger_entries (id serial PRIMARY KEY, key text NOT NULL)');
    pooled = new DataSource({ type: 'postgres', url: throughPgBouncer(db.url), migrations: idempotencyMigrations() });
    await pooled.initialize();
    await pooled.runMigrations();
  }
  return pooled;
}

async function directDataSource(): Promise<DataSource> {
  await pooledDataSource();
  if (!direct) {
    direct = new DataSource({ type: 'postgres', url: (db as TestDatabase).url });
    await direct.initialize();
  }
  return direct;
}

afterAll(async () => {
  await pooled?.destroy();
  await direct?.destroy();
  await db?.drop();
});

function newScope() {
  return { account: `acct_${randomUUID()}`, endpoint: 'POST /v1/pooler', key: randomUUID() };
}

describeThroughPgBouncer('PostgresIdempotencyStore through PgBouncer in transaction mode', () => {
  describeIdempotencyStoreContract(
    'transactionPooler: true, waits polling the record',
    async () => {
      const store = new PostgresIdempotencyStore(await pooledDataSource(), 'idempotency_records', {
        transactionPooler: true,
      });
      return { store, cleanup: () => store.close() };
    },
    POOLED_STORES,
  );

  describeIdempotencyStoreContract(
    'transactionPooler: true, waits on a listenConnection to PostgreSQL',
    async () => {
      const store = new PostgresIdempotencyStore(await pooledDataSource(), 'idempotency_records', {
        transactionPooler: true,
        listenConnection: (db as TestDatabase).url,
      });
      return { store, cleanup: () => store.close() };
    },
    POOLED_STORES,
  );

  describe('without transactionPooler', () => {
    it('fails concurrent claims on named prepared statements, and the error names transactionPooler: true', async () => {
      // Ten pooled clients on PgBouncer's four server connections: a statement one client prepared is met by another.
      // A statement per claim: coalesced, 32 claims would share a few statements, on a few connections.
      const store = new PostgresIdempotencyStore(await pooledDataSource(), 'idempotency_records', { batching: false });
      try {
        const results = await Promise.allSettled(
          Array.from({ length: 32 }, () => store.claim(newScope(), 'fp', randomUUID(), LONG)),
        );
        const failures = results.flatMap((result) => (result.status === 'rejected' ? [result.reason as Error] : []));
        expect(failures.length).toBeGreaterThan(0);
        for (const failure of failures) {
          expect(failure.message).toMatch(/prepared statement "idempotency_\w+" (already exists|does not exist)/);
          expect(failure.message).toContain('transaction pooler');
          expect(failure.message).toContain('`transactionPooler: true`');
        }
      } finally {
        await store.close();
      }
    });

    it('is refused at start-up: two sessions of the data source run on one backend', async () => {
      const store = new PostgresIdempotencyStore(await pooledDataSource(), 'idempotency_records');
      const check = store.checkSchema();
      await expect(check).rejects.toThrow(IdempotencySetupError);
      await expect(check).rejects.toThrow(
        /data source goes through a transaction pooler.*one PostgreSQL backend \(pid \d+\).*Pass `transactionPooler: true`/s,
      );
    });

    it('is not refused on a data source straight to PostgreSQL', async () => {
      const store = new PostgresIdempotencyStore(await directDataSource(), 'idempotency_records');
      await expect(store.checkSchema()).resolves.toBeUndefined();
    });
  });

  describe('the start-up check with transactionPooler: true', () => {
    it('passes with waits polling, and with a listenConnection straight to PostgreSQL', async () => {
      const data = await pooledDataSource();
      for (const listenConnection of [undefined, db?.url]) {
        const store = new PostgresIdempotencyStore(data, 'idempotency_records', {
          transactionPooler: true,
          ...(listenConnection === undefined ? {} : { listenConnection }),
        });
        await expect(store.checkSchema()).resolves.toBeUndefined();
      }
    });

    it('refuses a listenConnection through the pooler, naming the fix', async () => {
      const data = await pooledDataSource();
      const store = new PostgresIdempotencyStore(data, 'idempotency_records', {
        transactionPooler: true,
        listenConnection: throughPgBouncer((db as TestDatabase).url),
      });
      await expect(store.checkSchema()).rejects.toThrow(
        /listenConnection goes through a transaction pooler.*Give listenConnection a connection straight to PostgreSQL/s,
      );
    });
  });

  describe("a transactional run's transaction", () => {
    // PgBouncer gives a client a server connection from its BEGIN to its COMMIT or ROLLBACK: the run's statements,
    // the handler's and the outcome's, all land on it, while other clients' statements go to the other ones.
    async function backendOf(transaction: { manager: { query(sql: string): Promise<unknown> } }): Promise<number> {
      const [{ pid }] = (await transaction.manager.query('SELECT pg_backend_pid() AS pid')) as [{ pid: number }];
      return pid;
    }

    for (const end of ['commit', 'rollback'] as const) {
      it(`stays on one server connection, and its writes and the outcome ${end} together`, async () => {
        const store = new PostgresIdempotencyStore(await pooledDataSource(), 'idempotency_records', {
          transactionPooler: true,
        });
        try {
          const scope = newScope();
          const attempt = randomUUID();
          expect(await store.claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
          const transaction = await store.beginTransaction(5_000);
          const backends = [await backendOf(transaction)];
          await transaction.manager.query('INSERT INTO ledger_entries (key) VALUES ($1)', [scope.key]);
          // Other clients keep PgBouncer's other server connections busy meanwhile.
          const others = await Promise.all(
            Array.from({ length: 16 }, () => store.claim(newScope(), 'fp', randomUUID(), LONG)),
          );
          expect(others.every((other) => other.claimed)).toBe(true);
          backends.push(await backendOf(transaction));
          expect(await store.complete({ scope, attempt }, response, 60, transaction)).toBe(true);
          backends.push(await backendOf(transaction));
          expect(new Set(backends).size).toBe(1);
          await (end === 'commit' ? transaction.commit() : transaction.rollback());

          const ledger = await (db as TestDatabase).query('SELECT id FROM ledger_entries WHERE key = $1', [scope.key]);
          const again = await store.claim(scope, 'other request', randomUUID(), LONG);
          if (end === 'commit') {
            expect(ledger).toHaveLength(1);
            expect(again).toMatchObject({ claimed: false, existing: { status: 'completed', fingerprint: 'fp' } });
          } else {
            expect(ledger).toHaveLength(0);
            expect(again).toEqual({ claimed: false, existing: { status: 'in_progress', fingerprint: 'fp' } });
          }
        } finally {
          await store.close();
        }
      });
    }

    it('needs its BEGIN: outside a transaction, two clients of the data source run on one backend', async () => {
      // The control of the test above: without BEGIN, two sessions share a backend (what the start-up check sees).
      const data = await pooledDataSource();
      const [first, second] = [data.createQueryRunner(), data.createQueryRunner()];
      try {
        await first.connect();
        await second.connect();
        const pidOf = async (runner: typeof first) =>
          ((await runner.query('SELECT pg_backend_pid() AS pid')) as [{ pid: number }])[0].pid;
        expect(await pidOf(first)).toBe(await pidOf(second));
      } finally {
        await first.release();
        await second.release();
      }
    });
  });
});
