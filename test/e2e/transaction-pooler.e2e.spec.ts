import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencySetupError } from '../../src/index.js';
import {
  type IdempotencyPostgresOptions,
  PostgresIdempotencyContext,
  type PostgresIdempotencyStore,
} from '../../src/postgres/index.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import { describeThroughPgBouncer, throughPgBouncer } from '../support/pgbouncer.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { compileTestModule, startTestApp, type TestApp, type TestModuleOptions } from '../support/test-app.js';

/**
 * Applications whose data source goes through PgBouncer 1.18 in transaction mode (PGBOUNCER_URL), in standard and
 * transactional mode, with `inFlight: 'wait'`: bursts of concurrent requests on distinct keys and on one key, with
 * waits polling the record and LISTENing on a connection straight to PostgreSQL; and the start refused without
 * `transactionPooler: true`.
 */

/** How long the handler works: long enough for the burst's duplicates to arrive while it runs. */
const WORK_MS = 100;
/** Longer than any burst takes: a waiter woken only by its timeout would show in the burst's duration. */
const WAIT_SECONDS = 30;

@Controller('ledger')
class LedgerController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly context: PostgresIdempotencyContext,
  ) {}

  @Post('standard')
  @Idempotent()
  standard(@Body() body: { key: string }) {
    return this.record(body.key);
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  transactional(@Body() body: { key: string }) {
    return this.record(body.key);
  }

  /** A standard handler whose outcome waits for the whole gathering: a burst's outcomes are made at one moment. */
  @Post('gathered')
  @Idempotent()
  async gathered(@Body() body: { key: string }) {
    const recorded = await this.record(body.key);
    await gathering?.arrived();
    return recorded;
  }

  /** A write, in the run's transaction in transactional mode, and the work it stands for. */
  private async record(key: string) {
    const manager = this.context.manager ?? this.dataSource.manager;
    const [{ id }] = await manager.query<[{ id: number }]>(
      'INSERT INTO ledger_entries (key) VALUES ($1) RETURNING id',
      [key],
    );
    await delay(WORK_MS);
    return { id };
  }
}

/** Handlers held until `size` of them have arrived (then `onGathered`), or for at most 10 s. */
function gatheringOf(size: number, onGathered: () => void) {
  let arrivals = 0;
  let release = () => {};
  const all = new Promise<void>((resolve) => {
    release = resolve;
    setTimeout(resolve, 10_000).unref();
  });
  return {
    async arrived(): Promise<void> {
      if (++arrivals === size) {
        onGathered();
        release();
      }
      await all;
    },
  };
}
let gathering: ReturnType<typeof gatheringOf> | undefined;

let db: TestDatabase | undefined;
const logger = new RecordingLogger();

afterAll(async () => {
  await db?.drop();
});

async function database(): Promise<TestDatabase> {
  if (!db) {
    db = await createTestDatabase();
    await db.query('CREATE TABLE ledger_entries (id serial PRIMARY KEY, key text NOT NULL)');
  }
  return db;
}

/** The application's module on the test database through PgBouncer, with the store's `postgres` options. */
async function throughPgBouncerWith(postgres: IdempotencyPostgresOptions): Promise<TestModuleOptions> {
  const direct = await database();
  return {
    database: { url: throughPgBouncer(direct.url) },
    postgres,
    idempotency: { singleTenant: true, inFlight: 'wait', inFlightWaitSeconds: WAIT_SECONDS },
    controllers: [LedgerController],
    logger,
  };
}

/** Sends one request per key, all at once, to `route`, each with the key in its body too; answers with statuses. */
async function burst(app: TestApp, route: string, keys: string[]) {
  return Promise.all(
    keys.map(async (key) => {
      const response = await fetch(`${app.url}/ledger/${route}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ key }),
      });
      return { status: response.status, body: (await response.json()) as { id?: number } };
    }),
  );
}

async function ledgerOf(keys: string[]): Promise<Map<string, number[]>> {
  const rows = await (
    await database()
  ).query<{ key: string; id: number }>('SELECT key, id FROM ledger_entries WHERE key = ANY($1) ORDER BY id', [keys]);
  const ids = new Map<string, number[]>();
  for (const { key, id } of rows) ids.set(key, [...(ids.get(key) ?? []), id]);
  return ids;
}

describeThroughPgBouncer('an application through PgBouncer in transaction mode', () => {
  afterEach(() => {
    expect(logger.errors.splice(0)).toEqual([]);
  });

  const waits: Array<[string, () => IdempotencyPostgresOptions]> = [
    ['waits polling the record', () => ({ transactionPooler: true })],
    [
      'waits on a listenConnection straight to PostgreSQL',
      () => ({ transactionPooler: true, listenConnection: (db as TestDatabase).url }),
    ],
  ];

  describe.each(waits)('transactionPooler: true, %s', (_, options) => {
    let app: TestApp | undefined;
    beforeAll(async () => {
      await database();
      app = await startTestApp(await throughPgBouncerWith(options()));
    });
    afterAll(async () => {
      await app?.close();
    });

    it('stores the outcomes of a standard burst made at one moment in shared statements', async () => {
      const store = (app as TestApp).app.get<symbol, PostgresIdempotencyStore>(IDEMPOTENCY_STORE);
      const keys = Array.from({ length: 32 }, () => randomUUID());
      let claimed = Number.NaN;
      gathering = gatheringOf(keys.length, () => (claimed = store.statementsSent)); // every claim answered by then
      const results = await burst(app as TestApp, 'gathered', keys);
      expect(results.map((result) => result.status)).toEqual(keys.map(() => 201));
      const ledger = await ledgerOf(keys);
      keys.forEach((key, index) => expect(ledger.get(key)).toEqual([results[index].body.id]));
      // Two outcomes go out alone, the others gather behind them into one statement (unnamed, as every statement
      // here): a statement each would be 32.
      expect(store.statementsSent - claimed).toBeLessThanOrEqual(4);
    });

    describe.each(['standard', 'transactional'])('in %s mode', (route) => {
      it('answers a burst of 32 distinct keys 201, each run once', async () => {
        const keys = Array.from({ length: 32 }, () => randomUUID());
        const results = await burst(app as TestApp, route, keys);
        expect(results.map((result) => result.status)).toEqual(keys.map(() => 201));
        const ledger = await ledgerOf(keys);
        keys.forEach((key, index) => expect(ledger.get(key)).toEqual([results[index].body.id]));
      });

      it('answers a burst of 16 requests with one key 201: one run, the others wait for its outcome', async () => {
        const key = randomUUID();
        const started = Date.now();
        const results = await burst(
          app as TestApp,
          route,
          Array.from({ length: 16 }, () => key),
        );
        const took = Date.now() - started;
        expect(results.map((result) => result.status)).toEqual(results.map(() => 201));
        const ledger = await ledgerOf([key]);
        expect(ledger.get(key)).toHaveLength(1);
        for (const result of results) expect(result.body.id).toBe(ledger.get(key)?.[0]);
        // Woken by the outcome, not by their timeout: a wait that missed it would have lasted WAIT_SECONDS.
        expect(took).toBeLessThan((WAIT_SECONDS / 3) * 1000);
      });
    });
  });

  it('refuses to start without transactionPooler: true, naming it', async () => {
    const { moduleRef } = await compileTestModule(await throughPgBouncerWith({}));
    const app = moduleRef.createNestApplication({ rawBody: true, logger });
    try {
      const starting = app.init();
      await expect(starting).rejects.toThrow(IdempotencySetupError);
      await expect(starting).rejects.toThrow(/transaction pooler.*Pass `transactionPooler: true`/s);
    } finally {
      await app.close();
    }
  });
});
