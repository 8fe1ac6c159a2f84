import { randomUUID } from 'node:crypto';
import { ConsoleLogger, Logger } from '@nestjs/common';
import {
  DataSource,
  type DataSourceOptions,
  type EntitySubscriberInterface,
  EventSubscriber,
  type TransactionStartEvent,
} from 'typeorm';
import { IdempotencyService, type IdempotencyScope } from '../../src/index.js';
import { type ProtocolIdempotentOptions } from '../../src/protocol/idempotency-options.interface.js';
import {
  idempotencyMigrations,
  IdempotencyRecord,
  PostgresIdempotencyStore,
  type PostgresStoreTransaction,
} from '../../src/postgres/index.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * Holder transactions (opened before the claim, holding the scope's advisory lock) under what the data source and
 * the database configure: an isolation level, a default isolation above read committed, a pool too small for one.
 */

let db: TestDatabase;
let databaseName: string;

beforeAll(async () => {
  db = await createTestDatabase();
  databaseName = new URL(db.url).pathname.slice(1);
  await db.query('CREATE TABLE charges (key text PRIMARY KEY)');
});

afterAll(async () => {
  await db?.drop();
});

interface Setup {
  dataSource: DataSource;
  store: PostgresIdempotencyStore;
  service: IdempotencyService;
}

/** What the tests set on the data source: TypeORM's postgres options of those names. */
interface DataSourceSettings {
  isolationLevel?: 'READ COMMITTED' | 'REPEATABLE READ';
  extra?: { max: number };
  poolSize?: number;
  subscribers?: DataSourceOptions['subscribers'];
}

/** A store and a service on a data source of `options`, closed after `use`. */
async function onDataSource(options: DataSourceSettings, use: (setup: Setup) => Promise<void>): Promise<void> {
  const dataSource = new DataSource({
    type: 'postgres',
    url: db.url,
    entities: [IdempotencyRecord],
    migrations: idempotencyMigrations(),
    ...options,
  });
  await dataSource.initialize();
  await dataSource.runMigrations();
  const store = new PostgresIdempotencyStore(dataSource, 'idempotency_records');
  const service = new IdempotencyService(store, { singleTenant: true, storeTimeoutSeconds: 2 });
  try {
    await use({ dataSource, store, service });
  } finally {
    await store.close();
    await dataSource.destroy();
  }
}

/** A transactional operation that writes a charge, and tells the isolation it ran under. */
function charge(service: IdempotencyService, key: string, options: ProtocolIdempotentOptions = {}) {
  return service.execute(
    { name: 'charge', key, input: { amount: 100 } },
    async (run) => {
      const { manager } = run.transaction as PostgresStoreTransaction;
      const [{ transaction_isolation: isolation }] =
        await manager.query<{ transaction_isolation: string }[]>('SHOW transaction_isolation');
      await manager.query('INSERT INTO charges (key) VALUES ($1)', [key]);
      return { isolation };
    },
    { ...options, transactional: true },
  );
}

/** Charges `key` once, then again: the second is the first's replay, and one charge is written. */
async function expectChargedOnce(
  service: IdempotencyService,
  key: string,
  isolation: string,
  options: ProtocolIdempotentOptions = {},
): Promise<void> {
  await expect(charge(service, key, options)).resolves.toEqual({ result: { isolation }, replayed: false });
  await expect(charge(service, key, options)).resolves.toEqual({ result: { isolation }, replayed: true });
  await expect(db.query('SELECT key FROM charges WHERE key = $1', [key])).resolves.toEqual([{ key }]);
  await expect(db.query('SELECT status FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual([
    { status: 'completed' },
  ]);
}

const scopeOf = (key: string): IdempotencyScope => ({ account: 'acct_1', endpoint: 'POST /v1/charges', key });

/**
 * Waits until no session of the test's database holds an advisory lock or idles inside a transaction. A discarded
 * connection is closed by the pool without waiting for the server, whose backend ends (and lets its locks go) a
 * moment later; one given back to the pool inside its transaction would stay so.
 */
async function noLeftovers(): Promise<void> {
  await waitFor(
    async () => {
      const { locks, idleInTransaction } = await leftovers();
      return locks === 0 && idleInTransaction === 0 ? true : undefined;
    },
    'no advisory lock and no session idle in a transaction',
    5_000,
  );
}

/** Advisory locks and sessions idle inside a transaction, in the test's database. */
async function leftovers(): Promise<{ locks: number; idleInTransaction: number }> {
  const [row] = await db.query<{ locks: number; idle_in_transaction: number }>(
    `SELECT (SELECT count(*)::int FROM pg_locks l JOIN pg_database d ON d.oid = l.database
             WHERE l.locktype = 'advisory' AND d.datname = current_database()) AS locks,
            (SELECT count(*)::int FROM pg_stat_activity
             WHERE datname = current_database() AND state LIKE 'idle in transaction%') AS idle_in_transaction`,
  );
  return { locks: row.locks, idleInTransaction: row.idle_in_transaction };
}

describe('under a database whose default isolation is repeatable read', () => {
  beforeAll(async () => {
    await db.query(`ALTER DATABASE ${databaseName} SET default_transaction_isolation = 'repeatable read'`);
  });

  afterAll(async () => {
    await db.query(`ALTER DATABASE ${databaseName} RESET default_transaction_isolation`);
  });

  it('completes transactional operations (no holder: its snapshot would miss the claim), charged once, and says so once', async () => {
    const logger = new RecordingLogger();
    Logger.overrideLogger(logger);
    try {
      await onDataSource({}, async ({ store, service }) => {
        await expectChargedOnce(service, randomUUID(), 'repeatable read');
        // The first holder met such an isolation; none is opened again.
        await expect(store.beginHoldingTransaction(scopeOf(randomUUID()))).resolves.toBeUndefined();
      });
    } finally {
      Logger.overrideLogger(new ConsoleLogger());
    }
    expect(logger.warnings).toEqual([
      expect.stringMatching(
        /^WARN \[Idempotency\] Transactional attempts open no holder transaction from now on: .*default_transaction_isolation is above read committed.* isolationLevel: 'READ COMMITTED'/,
      ),
    ]);
  });

  it("completes them under the data source's isolationLevel REPEATABLE READ, opening no holder", async () => {
    await onDataSource({ isolationLevel: 'REPEATABLE READ' }, async ({ store, service }) => {
      await expectChargedOnce(service, randomUUID(), 'repeatable read');
      await expect(store.beginHoldingTransaction(scopeOf(randomUUID()))).resolves.toBeUndefined();
    });
  });

  it("opens holders in the data source's isolationLevel READ COMMITTED, set before the lock is taken", async () => {
    await onDataSource({ isolationLevel: 'READ COMMITTED' }, async ({ store, service }) => {
      const holder = (await store.beginHoldingTransaction(scopeOf(randomUUID()))) as PostgresStoreTransaction;
      try {
        expect(holder.heldLock).toBeDefined();
        await expect(holder.manager.query('SHOW transaction_isolation')).resolves.toEqual([
          { transaction_isolation: 'read committed' },
        ]);
      } finally {
        await holder.rollback();
      }
      await expectChargedOnce(service, randomUUID(), 'read committed');
    });
  });
});

describe('a holder whose start fails', () => {
  /** Fails the start of transactions after a query of its own, while `failing` is set. */
  @EventSubscriber()
  class FailingTransactionStart implements EntitySubscriberInterface {
    static failing = false;

    async afterTransactionStart(event: TransactionStartEvent): Promise<void> {
      if (!FailingTransactionStart.failing) return;
      await event.queryRunner.query('SELECT 1');
      throw new Error('a subscriber refused the transaction');
    }
  }

  it('gives no connection back to the pool inside its transaction, nor with the lock', async () => {
    await onDataSource({ subscribers: [FailingTransactionStart], extra: { max: 3 } }, async ({ store }) => {
      const scope = scopeOf(randomUUID());
      FailingTransactionStart.failing = true;
      try {
        await expect(store.beginHoldingTransaction(scope)).rejects.toThrow('a subscriber refused the transaction');
      } finally {
        FailingTransactionStart.failing = false;
      }
      await noLeftovers();
      const holder = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
      expect(holder.heldLock).toBeDefined();
      await holder.rollback();
    });
  });
});

// From a second review of #19: a commit or rollback that a transaction subscriber fails is never sent, and the
// connection went back to the pool inside its transaction, with the outcome's row lock and the scope's lock.
describe('a holder whose commit or rollback fails', () => {
  /** Fails the end of transactions, before TypeORM sends COMMIT or ROLLBACK, while `failing` is set. */
  @EventSubscriber()
  class FailingTransactionEnd implements EntitySubscriberInterface {
    static failing = false;

    beforeTransactionCommit(): void {
      if (FailingTransactionEnd.failing) throw new Error('a subscriber refused the commit');
    }

    beforeTransactionRollback(): void {
      if (FailingTransactionEnd.failing) throw new Error('a subscriber refused the rollback');
    }
  }

  it.each(['commit', 'rollback'] as const)(
    'gives no connection back to the pool inside its transaction (%s), and the retry runs',
    async (ending) => {
      await onDataSource({ subscribers: [FailingTransactionEnd], extra: { max: 4 } }, async ({ store, service }) => {
        const key = randomUUID();
        const holder = (await store.beginHoldingTransaction(scopeOf(key))) as PostgresStoreTransaction;
        expect(holder.heldLock).toBeDefined();
        FailingTransactionEnd.failing = true;
        try {
          await expect(holder[ending]()).rejects.toThrow(`a subscriber refused the ${ending}`);
        } finally {
          FailingTransactionEnd.failing = false;
        }
        await noLeftovers();
        await expectChargedOnce(service, key, 'read committed');
      });
    },
  );
});

describe('small pools', () => {
  // With inFlight: 'wait', the LISTEN connection is open too: a pool of 2 then has one left, which a holder would take.
  it.each([
    ['extra.max 1', { extra: { max: 1 } }, {}],
    ['poolSize 1', { poolSize: 1 }, {}],
    ['extra.max 2 and LISTEN open', { extra: { max: 2 } }, { inFlight: 'wait' as const }],
  ])(
    'with %s, transactional requests complete, and no holder is opened (it would take the connection of its claim)',
    async (_, dataSourceOptions, routeOptions) => {
      await onDataSource(dataSourceOptions, async ({ store, service }) => {
        await expectChargedOnce(service, randomUUID(), 'read committed', routeOptions);
        await expect(store.beginHoldingTransaction(scopeOf(randomUUID()))).resolves.toBeUndefined();
      });
    },
  );
});
