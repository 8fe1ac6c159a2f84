import { randomUUID } from 'node:crypto';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Test, type TestingModuleBuilder } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule } from '../../src/index.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import { IdempotencyPostgresModule } from '../../src/postgres/index.js';
import {
  assertReplayed,
  type InMemoryStoreUnderTest,
  type SupertestAnswer,
  useInMemoryIdempotencyStore,
} from '../../src/testing/index.js';
import { RecordingLogger } from '../support/recording-logger.js';

// nest-idempotency/testing as README's "Testing with the in-memory store" shows it: an application on the PostgreSQL
// store, tested on the in-memory one with useInMemoryIdempotencyStore (its data source never connects), and its
// replays checked with assertReplayed.

@Controller('v1/orders')
class OrdersController {
  runs = 0;

  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    this.runs += 1;
    return { order: this.runs, amount: body.amount };
  }

  /** Fails: a 500, which releases the key instead of storing an answer. */
  @Post('failing')
  @Idempotent()
  fail() {
    this.runs += 1;
    throw new Error('the order failed');
  }
}

@Module({
  imports: [
    // A data source that never connects (`manualInitialization`; port 1, where nothing listens).
    TypeOrmModule.forRoot({ type: 'postgres', manualInitialization: true, host: '127.0.0.1', port: 1 }),
    // The replay cache keeps outcomes on the process's clock: off, so that advanceTime() expires them.
    IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), singleTenant: true, replayCache: false }),
  ],
  controllers: [OrdersController],
})
class AppModule {}

const logger = new RecordingLogger();
let app: INestApplication;
let url: string;
let memory: InMemoryStoreUnderTest<TestingModuleBuilder>;

beforeAll(async () => {
  memory = useInMemoryIdempotencyStore(Test.createTestingModule({ imports: [AppModule] }).setLogger(logger));
  app = (await memory.builder.compile()).createNestApplication({ rawBody: true, logger });
  await app.listen(0, '127.0.0.1');
  url = await app.getUrl();
});

afterAll(async () => {
  await app?.close();
});

const order =
  (key: string, path = '/v1/orders') =>
  () =>
    request(url).post(path).set('Idempotency-Key', key).send({ amount: 12 });
const runs = () => app.get(OrdersController).runs;

describe('useInMemoryIdempotencyStore', () => {
  it('puts the store it returns under IDEMPOTENCY_STORE: the application keeps its records there, never connecting', async () => {
    expect(app.get(IDEMPOTENCY_STORE)).toBe(memory.store);
    const before = runs();
    const { first } = await assertReplayed(order(randomUUID()));
    expect(first.status).toBe(201);
    expect(runs()).toBe(before + 1);
    expect(app.get<DataSource>(getDataSourceToken()).isInitialized).toBe(false);
    expect(logger.warnings).toEqual([expect.stringContaining("keeps its records in this process's memory")]);
  });

  it("moves the store's clock with advanceTime: within the TTL (a day) the key replays, past it the key runs again", async () => {
    const send = order(randomUUID());
    const first = await send().expect(201);
    memory.advanceTime(86_400 - 5);
    const replay = await send().expect(201);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.text).toBe(first.text);
    memory.advanceTime(10);
    const again = await send().expect(201);
    expect(again.headers['idempotent-replay']).toBeUndefined();
    expect(again.body.order).toBe(first.body.order + 1);
  });

  it('refuses to move the clock back, or by what is not a number', () => {
    expect(() => memory.advanceTime(-1)).toThrow(RangeError);
    expect(() => memory.advanceTime(Number.NaN)).toThrow('advanceTime takes a number of seconds, 0 or more, got NaN');
  });
});

describe('assertReplayed', () => {
  it('takes fetch() answers too, and leaves their body to the test', async () => {
    const key = randomUUID();
    const send = () =>
      fetch(`${url}/v1/orders`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key },
        body: JSON.stringify({ amount: 3 }),
      });
    const { first, replay } = await assertReplayed(send);
    expect(await replay.json()).toEqual(await first.json());
  });

  it('fails when the second answer is not a replay: a 500 releases the key', async () => {
    const before = runs();
    await expect(assertReplayed(order(randomUUID(), '/v1/orders/failing'))).rejects.toThrow(
      /^The second answer \(500\) is not a replay \(Idempotent-Replay: absent\): the first answer \(500\) was not stored/,
    );
    expect(runs()).toBe(before + 2);
    expect(logger.errors.splice(0)).toEqual([
      expect.stringContaining('the order failed'),
      expect.stringContaining('the order failed'),
    ]);
  });

  it('fails when the first answer is a replay already: the key was used before', async () => {
    const send = order(randomUUID());
    await send().expect(201);
    await expect(assertReplayed(send)).rejects.toThrow(
      'The first answer is already a replay (Idempotent-Replay: true): its key was used before; send a new one.',
    );
  });

  it("reads the module's replayHeaderName when told", async () => {
    await expect(assertReplayed(order(randomUUID()), { replayHeader: 'X-Replayed' })).rejects.toThrow(
      /is not a replay \(X-Replayed: absent\)/,
    );
  });

  describe('compares the replay with the first answer', () => {
    const answer = (status: number, contentType: string, text: string, replayed = false): SupertestAnswer => ({
      status,
      headers: { 'content-type': contentType, ...(replayed ? { 'idempotent-replay': 'true' } : {}) },
      text,
    });
    const sending = (...answers: SupertestAnswer[]) => {
      const next = answers.values();
      return async () => next.next().value as SupertestAnswer;
    };

    it.each([
      ['status', answer(200, 'application/json', '{}', true), 'The replay has another status than the first answer.'],
      [
        'Content-Type',
        answer(201, 'text/plain', '{}', true),
        'The replay has another Content-Type than the first answer.',
      ],
      ['body', answer(201, 'application/json', '{ }', true), 'The replay has another body than the first answer.'],
    ])('fails on another %s', async (_what, replay, message) => {
      await expect(assertReplayed(sending(answer(201, 'application/json', '{}'), replay))).rejects.toThrow(message);
    });

    it('compares bodies that are bytes (supertest gives no text for them) byte for byte', async () => {
      const bytes = (body: Buffer, replayed = false): SupertestAnswer => ({
        status: 201,
        headers: { 'content-type': 'application/octet-stream', ...(replayed ? { 'idempotent-replay': 'true' } : {}) },
        body,
      });
      await expect(
        assertReplayed(sending(bytes(Buffer.from([0xff, 0x00])), bytes(Buffer.from([0xff, 0x00]), true))),
      ).resolves.toBeDefined();
      await expect(
        assertReplayed(sending(bytes(Buffer.from([0xff, 0x00])), bytes(Buffer.from([0xff, 0x01]), true))),
      ).rejects.toThrow('The replay has another body than the first answer.');
    });
  });
});
