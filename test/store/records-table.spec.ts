import { randomUUID } from 'node:crypto';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import type { DynamicModule } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource, type MigrationInterface } from 'typeorm';
import { IdempotencyModule } from '../../src/index.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import {
  idempotencyMigrations,
  IdempotencyPostgresModule,
  IdempotencyRecord,
  PostgresIdempotencyStore,
} from '../../src/postgres/index.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

const [V0_1_0, V0_2_0, V0_2_0_LOCK_HELD] = idempotencyMigrations();
const timing = { leaseSeconds: 30, ttlSeconds: 3600 };

/** A fresh database per test: each one starts from a different schema. */
let db: TestDatabase;

beforeEach(async () => {
  db = await createTestDatabase();
});

afterEach(async () => {
  await db.drop();
});

/** Runs `migrations` on the test's database with the entity mapped, then hands the data source to `use`. */
async function withMigrated<T>(
  migrations: (new () => MigrationInterface)[],
  use: (dataSource: DataSource) => Promise<T>,
): Promise<T> {
  const dataSource = new DataSource({ type: 'postgres', url: db.url, entities: [IdempotencyRecord], migrations });
  await dataSource.initialize();
  try {
    await dataSource.runMigrations();
    return await use(dataSource);
  } finally {
    await dataSource.destroy();
  }
}

/** What TypeORM would still change to make the database match the entity: nothing, when the migrations are right. */
async function differencesFromEntity(dataSource: DataSource): Promise<string[]> {
  return (await dataSource.driver.createSchemaBuilder().log()).upQueries.map((query) => query.query);
}

describe('the migration history', () => {
  it('applies in order to an empty database and creates exactly what the entity maps', async () => {
    await withMigrated(idempotencyMigrations(), async (dataSource) => {
      const applied = await db.query<{ name: string }>('SELECT name FROM migrations ORDER BY id');
      expect(applied.map(({ name }) => name)).toEqual([
        'CreateIdempotencyRecords1764633600000',
        'IdempotencyRecordsV0_2_0_1796256000000',
        'IdempotencyRecordsV0_2_0LockHeld_1796342400000',
        'IdempotencyRecordsV0_4_0Steps_1796774400000',
        'IdempotencyRecordsV0_4_0InProgressIndex_1796860800000',
      ]);
      await expect(differencesFromEntity(dataSource)).resolves.toEqual([]);
    });
  });

  it("brings the previous version's table, rows included, up to date, and the store works on those rows", async () => {
    await withMigrated([V0_1_0], async () => {
      // Rows as 0.1.0 wrote them: one completed outcome, one claim whose holder died (its lease has lapsed).
      await db.query(`
        INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt,
                                         response_status, response_headers, response_body, created_at, completed_at, expires_at)
        VALUES ('acct', 'POST /charges', 'done', 'fp-done', 'completed', gen_random_uuid(),
                201, '{"content-type":"application/json"}', convert_to('{"id":"ch_1"}', 'UTF8'), now(), now(), now() + interval '1 day')`);
      await db.query(`
        INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, locked_until, expires_at)
        VALUES ('acct', 'POST /charges', 'crashed', 'fp-crashed', 'in_progress', gen_random_uuid(), now(), now() - interval '1 second', now() + interval '1 day')`);
    });

    await withMigrated(idempotencyMigrations(), async (dataSource) => {
      await expect(differencesFromEntity(dataSource)).resolves.toEqual([]);
      await expect(
        db.query(
          'SELECT idempotency_key, attempts, awaited, lock_held FROM idempotency_records ORDER BY idempotency_key',
        ),
      ).resolves.toEqual([
        { idempotency_key: 'crashed', attempts: 1, awaited: false, lock_held: false },
        { idempotency_key: 'done', attempts: 1, awaited: false, lock_held: false },
      ]);
      const store = new PostgresIdempotencyStore(dataSource, 'idempotency_records');
      await expect(store.checkSchema()).resolves.toBeUndefined();
      const scope = { account: 'acct', endpoint: 'POST /charges' };
      await expect(store.claim({ ...scope, key: 'done' }, 'fp-done', randomUUID(), timing)).resolves.toEqual({
        claimed: false,
        existing: {
          status: 'completed',
          fingerprint: 'fp-done',
          response: {
            status: 201,
            headers: { 'content-type': 'application/json' },
            body: Buffer.from('{"id":"ch_1"}'),
          },
          expiresInSeconds: expect.any(Number),
        },
      });
      await expect(store.claim({ ...scope, key: 'crashed' }, 'fp-crashed', randomUUID(), timing)).resolves.toEqual({
        claimed: true,
        takeover: true,
      });
    });
  });

  it('accepts a table a development checkout created before the history began (the columns already there)', async () => {
    // Such a checkout ran a 0.1.0 migration of the same name that already created `attempts` and `awaited`.
    await withMigrated(idempotencyMigrations(), async (dataSource) => {
      await db.query(`DELETE FROM migrations WHERE name = 'IdempotencyRecordsV0_2_0_1796256000000'`);
      const applied = await dataSource.runMigrations();
      expect(applied.map(({ name }) => name)).toEqual(['IdempotencyRecordsV0_2_0_1796256000000']);
      await expect(differencesFromEntity(dataSource)).resolves.toEqual([]);
    });
  });

  it('reverts in reverse order, down to nothing', async () => {
    await withMigrated(idempotencyMigrations(), async (dataSource) => {
      const columnsNamed = (names: string[]) =>
        db.query(
          `SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'idempotency_records'::regclass AND attname = ANY ($1)`,
          [names],
        );
      const inProgressIndex = () =>
        db.query(`SELECT count(*)::int AS n FROM pg_indexes WHERE indexname = 'idempotency_records_in_progress_idx'`);
      await expect(inProgressIndex()).resolves.toEqual([{ n: 1 }]);
      await dataSource.undoLastMigration();
      await expect(inProgressIndex()).resolves.toEqual([{ n: 0 }]);
      await expect(columnsNamed(['steps'])).resolves.toEqual([{ n: 1 }]);
      await dataSource.undoLastMigration();
      await expect(columnsNamed(['steps'])).resolves.toEqual([{ n: 0 }]);
      await expect(columnsNamed(['lock_held'])).resolves.toEqual([{ n: 1 }]);
      await dataSource.undoLastMigration();
      await expect(columnsNamed(['lock_held'])).resolves.toEqual([{ n: 0 }]);
      await expect(columnsNamed(['attempts', 'awaited'])).resolves.toEqual([{ n: 2 }]);
      await dataSource.undoLastMigration();
      await expect(columnsNamed(['attempts', 'awaited'])).resolves.toEqual([{ n: 0 }]);
      await dataSource.undoLastMigration();
      await expect(db.query(`SELECT to_regclass('idempotency_records') AS t`)).resolves.toEqual([{ t: null }]);
    });
  });
});

describe('the check at start-up', () => {
  /** Starts an app on the test's database with `migrations` run (none: the table is never created). */
  async function start(
    migrations: (new () => MigrationInterface)[],
    {
      tableName,
      before,
      store = IdempotencyPostgresModule.forRoot({ tableName }),
    }: { tableName?: string; before?: () => Promise<unknown>; store?: DynamicModule } = {},
  ): Promise<void> {
    const dataSource = new DataSource({ type: 'postgres', url: db.url, migrations });
    await dataSource.initialize();
    await dataSource.runMigrations();
    await before?.();
    await dataSource.destroy();
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url }),
        IdempotencyModule.forRoot({ store, singleTenant: true }),
      ],
    }).compile();
    try {
      await moduleRef.init();
    } finally {
      await moduleRef.close();
    }
  }

  it('refuses to start without the table, naming it and both ways to create it', async () => {
    const refusal = start([]);
    await expect(refusal).rejects.toThrow(
      'The idempotency table "idempotency_records" does not exist in the database.',
    );
    await expect(refusal).rejects.toThrow(
      /add `idempotencyMigrations\(\)` \(from 'nest-idempotency\/postgres'\) to your data source's `migrations` and set `migrationsRun: true`, or run them with the TypeORM CLI/,
    );
  });

  it('names the migrations of a custom table name', async () => {
    await db.query('CREATE SCHEMA billing');
    await expect(start([], { tableName: 'billing.idem_keys' })).rejects.toThrow(
      /"billing.idem_keys" does not exist.*`idempotencyMigrations\('billing.idem_keys'\)`/,
    );
  });

  it("takes the store's options from its forRootAsync() factory (the table it checks is the factory's)", async () => {
    const store = IdempotencyPostgresModule.forRootAsync({ useFactory: () => ({ tableName: 'billing.idem_keys' }) });
    await expect(start([], { store })).rejects.toThrow(/"billing.idem_keys" does not exist/);
  });

  it("refuses the previous version's table, naming the missing columns", async () => {
    await expect(start([V0_1_0])).rejects.toThrow(
      /"idempotency_records" lacks the column\(s\) attempts, awaited, lock_held, steps: it was created by an earlier version/,
    );
  });

  it('refuses a table migrated before lock_held was added, naming it', async () => {
    await expect(start([V0_1_0, V0_2_0])).rejects.toThrow(
      /"idempotency_records" lacks the column\(s\) lock_held, steps:/,
    );
  });

  it("refuses 0.3's table (before steps), naming the column", async () => {
    await expect(start([V0_1_0, V0_2_0, V0_2_0_LOCK_HELD])).rejects.toThrow(
      /"idempotency_records" lacks the column\(s\) steps: it was created by an earlier version/,
    );
  });

  it('refuses a column of another type', async () => {
    const before = () => db.query('ALTER TABLE idempotency_records ALTER COLUMN response_body TYPE text');
    await expect(start(idempotencyMigrations(), { before })).rejects.toThrow(
      /has columns of other types \(response_body is text, not bytea\)/,
    );
  });

  it('refuses a table without the key that makes a claim atomic', async () => {
    const before = () => db.query('ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_pkey');
    await expect(start(idempotencyMigrations(), { before })).rejects.toThrow(
      /has no primary key \(or unique index\) on \(account, endpoint, idempotency_key\)/,
    );
  });

  // Review of issue #10: PostgreSQL's ON CONFLICT takes neither a deferrable constraint nor an invalid index (a
  // CREATE UNIQUE INDEX CONCURRENTLY that failed) as its arbiter; with either, the check passed and every claim was
  // answered 503 idempotency_store_unavailable, which is what the check is there to prevent.
  it('refuses a deferrable key, which ON CONFLICT cannot use', async () => {
    const before = async () => {
      await db.query('ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_pkey');
      await db.query(
        'ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_pkey PRIMARY KEY (account, endpoint, idempotency_key) DEFERRABLE',
      );
    };
    await expect(start(idempotencyMigrations(), { before })).rejects.toThrow(/has no primary key \(or unique index\)/);
  });

  it('refuses a unique index that is not valid (a concurrent build that failed), which ON CONFLICT ignores', async () => {
    const before = async () => {
      await db.query('ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_pkey');
      const duplicate = `('a', 'e', 'k', 'f', 'completed', gen_random_uuid(), now(), now())`;
      await db.query(
        `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, expires_at) VALUES ${duplicate}, ${duplicate}`,
      );
      await db
        .query(
          'CREATE UNIQUE INDEX CONCURRENTLY records_scope ON idempotency_records (account, endpoint, idempotency_key)',
        )
        .catch(() => undefined);
      await db.query('DELETE FROM idempotency_records');
    };
    await expect(start(idempotencyMigrations(), { before })).rejects.toThrow(/has no primary key \(or unique index\)/);
  });

  // ON CONFLICT (account, endpoint, idempotency_key) cannot use a partial index as its arbiter: every claim would fail
  // and every request be answered 503.
  it('refuses a table whose only unique index on the scope is partial, naming the key to add', async () => {
    const before = async () => {
      await db.query('ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_pkey');
      await db.query(
        "CREATE UNIQUE INDEX records_scope ON idempotency_records (account, endpoint, idempotency_key) WHERE status <> 'x'",
      );
    };
    await expect(start(idempotencyMigrations(), { before })).rejects.toThrow(
      'The idempotency table "idempotency_records" has no primary key (or unique index) on (account, endpoint, ' +
        "idempotency_key), which makes a key's claim atomic (a partial, deferrable or invalid one does not count: the " +
        "claim's ON CONFLICT cannot use it). Add it: " +
        '`ALTER TABLE "idempotency_records" ADD PRIMARY KEY (account, endpoint, idempotency_key)`.',
    );
  });

  it('accepts a unique index on the scope in place of the primary key, in any column order', async () => {
    const before = async () => {
      await db.query('ALTER TABLE idempotency_records DROP CONSTRAINT idempotency_records_pkey');
      await db.query('CREATE UNIQUE INDEX records_scope ON idempotency_records (idempotency_key, account, endpoint)');
    };
    await expect(start(idempotencyMigrations(), { before })).resolves.toBeUndefined();
  });

  it('starts with a warning when the database cannot be reached to check, and serves once it can', async () => {
    const proxy = await TcpProxy.to(db.url);
    const logger = new RecordingLogger();
    const setUp = new DataSource({ type: 'postgres', url: db.url, migrations: idempotencyMigrations() });
    await setUp.initialize();
    await setUp.runMigrations();
    await setUp.destroy();
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRootAsync({
          useFactory: () => ({ type: 'postgres', url: proxy.urlFor(db.url) }),
          // The data source connects, then the database goes away before the module checks the table.
          dataSourceFactory: async (options) => {
            const dataSource = await new DataSource(options!).initialize();
            proxy.takeDown();
            return dataSource;
          },
        }),
        IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), singleTenant: true }),
      ],
    })
      .setLogger(logger)
      .compile();
    try {
      await moduleRef.init();
      expect(logger.warnings).toEqual([
        expect.stringMatching(/^WARN \[Idempotency\] Could not check the idempotency store at start-up: /),
      ]);
      proxy.bringUp();
      const store = moduleRef.get<PostgresIdempotencyStore>(IDEMPOTENCY_STORE, { strict: false });
      await expect(store.checkSchema()).resolves.toBeUndefined();
    } finally {
      await moduleRef.close();
      await proxy.close();
    }
  });

  // From the review of #19: the pooler check's sessions had no timeout, and a server that takes them and never answers
  // (a session pooler out of server connections) held the start.
  it('starts, with a warning, when the transaction pooler check gets no answer within its bound', async () => {
    const logger = new RecordingLogger();
    const sockets: Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket.on('error', () => undefined)));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as AddressInfo;
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: db.url,
          migrations: idempotencyMigrations(),
          migrationsRun: true,
        }),
        IdempotencyModule.forRoot({
          store: IdempotencyPostgresModule.forRoot({
            listenConnection: `postgres://postgres@127.0.0.1:${port}/postgres`,
          }),
          singleTenant: true,
        }),
      ],
    })
      .setLogger(logger)
      .compile();
    try {
      await moduleRef.init();
      expect(logger.warnings).toEqual([
        expect.stringMatching(
          /^WARN \[Idempotency\] Could not check the idempotency store at start-up: the records table is in order, but whether a transaction pooler stands in front of listenConnection could not be checked: /,
        ),
      ]);
    } finally {
      await moduleRef.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  }, 20_000);
});
