import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import request from 'supertest';
import type { PaymentProvider } from '../src/payment-provider.js';
import { createTestDatabase, startApp, type TestDatabase } from './support.js';

describe("concurrent requests with one key, inFlight: 'wait'", () => {
  let database: TestDatabase;
  let app: INestApplication;
  let provider: PaymentProvider;
  let db: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    ({ app, provider } = await startApp(database.url, { IDEMPOTENCY_IN_FLIGHT: 'wait' }));
    db = await database.connect();
  });

  afterAll(async () => {
    await db?.end();
    await app?.close();
    await database?.drop();
  });

  it('answers every attempt with the one charge: the first runs, the others wait and get its replay', async () => {
    provider.delayMs = 500;
    const body = { amount: 3100, currency: 'eur' };
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        request(app.getHttpServer())
          .post('/charges')
          .set('X-Account', 'acct_wait')
          .set('Idempotency-Key', 'wait-1')
          .send(body),
      ),
    );

    expect(answers.map((res) => res.status)).toEqual(Array(8).fill(201));
    expect(new Set(answers.map((res) => res.text)).size).toBe(1);
    expect(answers.filter((res) => res.headers['idempotent-replay'] === 'true')).toHaveLength(7);

    const rows = await db.query(`SELECT id FROM charges WHERE account = 'acct_wait'`);
    expect(rows.rows).toEqual([{ id: answers[0].body.id }]);
    expect(provider.chargeCount).toBe(1);
  });
});
