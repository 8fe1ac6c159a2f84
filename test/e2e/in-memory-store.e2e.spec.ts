import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import request from 'supertest';
import {
  IDEMPOTENCY_STORE,
  IdempotencyContext,
  Idempotent,
  IdempotencyModule,
  IdempotencyService,
  IdempotencySetupError,
  InMemoryIdempotencyStore,
} from '../../src/index.js';
import { GateQueue } from '../support/gate.js';

// The README's "Testing with the in-memory store": an application whose store is overridden with the in-memory one
// starts and answers without any database. It still needs a TypeORM data source object, which need not connect.

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
    // The in-memory store's transactions hold the outcome only: there is no entity manager.
    return { order: this.runs, amount: body.amount, manager: this.context.manager === undefined ? 'none' : 'some' };
  }

  @Post('waiting')
  @Idempotent({ inFlight: 'wait' })
  createWaiting(@Body() body: { amount: number }) {
    return this.create(body);
  }
}

/** The application as an adopter has it: TypeORM for its data, the idempotency module on it. */
@Module({
  imports: [
    // In tests: a data source that never connects (`manualInitialization`), so no database is needed.
    // (Port 1 here, where nothing listens: a connection attempt would fail the test.)
    TypeOrmModule.forRoot({ type: 'postgres', manualInitialization: true, host: '127.0.0.1', port: 1 }),
    // The replay cache keeps outcomes on the process's clock: off, so that moving the store's clock expires them.
    IdempotencyModule.forRoot({ singleTenant: true, replayCache: false }),
  ],
  controllers: [OrdersController],
})
class AppModule {}

let app: INestApplication;
let store: InMemoryIdempotencyStore;
let now = Date.parse('2030-01-01T00:00:00Z');

beforeAll(async () => {
  store = new InMemoryIdempotencyStore({ now: () => now });
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
    .overrideProvider(IDEMPOTENCY_STORE)
    .useValue(store)
    .compile();
  app = moduleRef.createNestApplication({ rawBody: true });
  await app.init();
});

afterAll(async () => {
  gates.releaseAll();
  await app?.close();
});

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
    const waiter = post('/v1/orders/waiting', 'order-4', { amount: 6 }).then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 200)); // the waiter is in by now (it would have had its 409)
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
    expect(first.body).toMatchObject({ manager: 'none' });
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

  it('never connected its data source', () => {
    expect(app.get<DataSource>(getDataSourceToken()).isInitialized).toBe(false);
  });
});

describe('an application without any TypeORM data source', () => {
  it('is refused at start-up even with the store overridden: the module still needs a data source object', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ singleTenant: true })], controllers: [OrdersController] })
    class NoDataSourceModule {}
    const starting = Test.createTestingModule({ imports: [NoDataSourceModule] })
      .overrideProvider(IDEMPOTENCY_STORE)
      .useValue(new InMemoryIdempotencyStore())
      .compile();
    await expect(starting).rejects.toThrow(IdempotencySetupError);
    await expect(starting).rejects.toThrow(/default TypeORM data source, and the application has none/);
  });
});
