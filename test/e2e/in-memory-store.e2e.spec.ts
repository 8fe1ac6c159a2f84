import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import request from 'supertest';
import {
  IdempotencyContext,
  Idempotent,
  IdempotencyModule,
  IdempotencyService,
  InMemoryIdempotencyStore,
} from '../../src/index.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import { IdempotencyPostgresModule } from '../../src/postgres/index.js';
import { GateQueue } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { startTestApp } from '../support/test-app.js';

// docs/testing.md, "Testing with the in-memory store": an application on the in-memory store starts and answers
// without any database and without TypeORM (examples/memory-store-app proves it with TypeORM and pg not installed);
// an application on the PostgreSQL store has its store overridden with the in-memory one in its tests.

const gates = new GateQueue();

@Controller('v1/orders')
class OrdersController {
  runs = 0;

  constructor(private readonly context: IdempotencyContext) {}

  @Post()
  @Idempotent()
  async create(@Body() body: { amount: number }) {
    await gates.pass();
    this.runs += 1;
    return { order: this.runs, amount: body.amount };
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  createInTransaction(@Body() body: { amount: number }) {
    this.runs += 1;
    // The in-memory store's transactions hold the outcome only: a run has one, with no database connection.
    return { order: this.runs, amount: body.amount, transaction: this.context.run?.transaction ? 'some' : 'none' };
  }

  @Post('waiting')
  @Idempotent({ inFlight: 'wait' })
  createWaiting(@Body() body: { amount: number }) {
    return this.create(body);
  }
}

const logger = new RecordingLogger();
let app: INestApplication;
let now = Date.parse('2030-01-01T00:00:00Z');

beforeAll(async () => {
  ({ app } = await startTestApp({
    database: 'memory',
    store,
    // The replay cache keeps outcomes on the process's clock: off, so that moving the store's clock expires them.
    idempotency: { singleTenant: true, replayCache: false },
    controllers: [OrdersController],
    logger,
    listen: false,
  }));
});

afterAll(async () => {
  gates.releaseAll();
  await app?.close();
});

/** The store, whose `markAwaited` a test watches to know a waiter is waiting. */
const store = new InMemoryIdempotencyStore({ now: () => now });

/** Resolves once an attempt has marked a record awaited: it waits for the outcome from then on. */
function nextAwaitedMark(): Promise<void> {
  const markAwaited = store.markAwaited.bind(store);
  return new Promise((resolve) => {
    store.markAwaited = async (scope) => {
      store.markAwaited = markAwaited;
      const marked = await markAwaited(scope);
      resolve();
      return marked;
    };
  });
}

const post = (path: string, key: string, body: object) =>
  request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

describe('an application on the in-memory store, without a database', () => {
  it('runs a new key once and replays it, refuses a reuse, and runs it again once its record expired', async () => {
    const first = await post('/v1/orders', 'order-1', { amount: 100 });
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replay']).toBeUndefined();
    const replay = await post('/v1/orders', 'order-1', { amount: 100 });
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.text).toBe(first.text);
    await expect(post('/v1/orders', 'order-1', { amount: 999 })).resolves.toMatchObject({
      status: 422,
      body: { error: 'idempotency_key_reuse' },
    });

    // Past the TTL (a day by default) on the store's clock: the record is purged, and the key runs again.
    now += 86_400_000 + 1;
    await expect(app.get(IdempotencyService).purgeExpired()).resolves.toBe(1);
    const again = await post('/v1/orders', 'order-1', { amount: 999 });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replay']).toBeUndefined();
    expect(again.body).toEqual({ order: 2, amount: 999 });
  });

  it('answers a concurrent attempt 409, or with the outcome once it is stored when the route waits', async () => {
    const held = gates.holdNext();
    const first = post('/v1/orders', 'order-2', { amount: 5 }).then((res) => res);
    await held.reached;
    const conflict = await post('/v1/orders', 'order-2', { amount: 5 });
    expect(conflict.status).toBe(409);
    expect(conflict.headers['retry-after']).toBeDefined();
    held.release();
    await expect(first).resolves.toMatchObject({ status: 201 });

    const waited = gates.holdNext();
    const original = post('/v1/orders/waiting', 'order-4', { amount: 6 }).then((res) => res);
    await waited.reached;
    const waiting = nextAwaitedMark();
    const waiter = post('/v1/orders/waiting', 'order-4', { amount: 6 }).then((res) => res);
    await waiting;
    waited.release();
    const [originalResponse, waiterResponse] = await Promise.all([original, waiter]);
    expect(originalResponse.status).toBe(201);
    expect(waiterResponse.status).toBe(201);
    expect(waiterResponse.headers['idempotent-replay']).toBe('true');
    expect(waiterResponse.text).toBe(originalResponse.text);
  });

  it('stores the outcome of a transactional route with its (in-memory) transaction', async () => {
    const first = await post('/v1/orders/transactional', 'order-3', { amount: 7 });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ transaction: 'some' });
    const replay = await post('/v1/orders/transactional', 'order-3', { amount: 7 });
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.text).toBe(first.text);
  });

  it('runs IdempotencyService.execute() on it', async () => {
    const service = app.get(IdempotencyService);
    let runs = 0;
    const work = async () => ({ paid: (runs += 1) });
    await expect(service.execute({ name: 'payout', key: 'p-1', input: { amount: 3 } }, work)).resolves.toEqual({
      result: { paid: 1 },
      replayed: false,
    });
    await expect(service.execute({ name: 'payout', key: 'p-1', input: { amount: 3 } }, work)).resolves.toEqual({
      result: { paid: 1 },
      replayed: true,
    });
    expect(runs).toBe(1);
  });

  it("warns at start-up, once, that its records are this process's alone", () => {
    expect(logger.warnings.filter((line) => line.includes("records in this process's memory"))).toEqual([
      expect.stringMatching(/not shared with the application's other instances .*IdempotencyPostgresModule/),
    ]);
  });
});

describe('an application on the PostgreSQL store, with the in-memory store in its tests', () => {
  it('starts and answers with IDEMPOTENCY_STORE overridden, on a data source that never connects', async () => {
    @Module({
      imports: [
        // A data source that never connects (`manualInitialization`; port 1, where nothing listens).
        TypeOrmModule.forRoot({ type: 'postgres', manualInitialization: true, host: '127.0.0.1', port: 1 }),
        IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), singleTenant: true }),
      ],
      controllers: [OrdersController],
    })
    class PostgresAppModule {}
    const moduleRef = await Test.createTestingModule({ imports: [PostgresAppModule] })
      .overrideProvider(IDEMPOTENCY_STORE)
      .useValue(new InMemoryIdempotencyStore())
      .setLogger(new RecordingLogger())
      .compile();
    const overridden = moduleRef.createNestApplication({ rawBody: true, logger: false });
    await overridden.init();
    try {
      const send = () =>
        request(overridden.getHttpServer())
          .post('/v1/orders/transactional')
          .set('Idempotency-Key', 'o-1')
          .send({ amount: 1 });
      const first = await send();
      expect(first.status).toBe(201);
      const replay = await send();
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      expect(overridden.get<DataSource>(getDataSourceToken()).isInitialized).toBe(false);
    } finally {
      await overridden.close();
    }
  });
});
