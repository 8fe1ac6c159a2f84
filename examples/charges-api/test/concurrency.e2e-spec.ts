import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import request from 'supertest';
import type { PaymentProvider } from '../src/payment-provider.js';
import { createTestDatabase, startApp, type TestDatabase } from './support.js';

describe('concurrent requests with one key', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let provider: PaymentProvider;
  let db: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    ({ app, provider } = await startApp(database.url));
    db = await database.connect();
  });

  afterAll(async () => {
    await db?.end();
    await app?.close();
    await database?.drop();
  });

  it('makes exactly one charge; the others are told 409 request_in_progress with Retry-After', async () => {
    // A slow provider keeps the first attempt in progress while the others arrive.
    provider.delayMs = 500;
    const body = { amount: 2500, currency: 'eur' };
    const answers = await Promise.all(
      Array.from({ length: 8 }, () =>
        request(app.getHttpServer())
          .post('/charges')
          .set('X-Account', 'acct_race')
          .set('Idempotency-Key', 'race-1')
          .send(body),
      ),
    );

    const created = answers.filter((res) => res.status === 201);
    const conflicts = answers.filter((res) => res.status === 409);
    expect(created.length + conflicts.length).toBe(8);
    // They did race: the first attempt was still running when others arrived.
    expect(conflicts.length).toBeGreaterThan(0);
    // Every 201 is the one charge: the first attempt's, or a replay of it.
    expect(new Set(created.map((res) => res.body.id)).size).toBe(1);
    expect(created.filter((res) => res.headers['idempotent-replay'] === undefined)).toHaveLength(1);
    for (const res of conflicts) {
      expect(res.body).toMatchObject({ statusCode: 409, error: 'request_in_progress' });
      expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    }

    const rows = await db.query(`SELECT id FROM charges WHERE account = 'acct_race'`);
    expect(rows.rows).toEqual([{ id: created[0].body.id }]);
    expect(provider.chargeCount).toBe(1);

    // Once the first attempt is done, a retry gets its charge.
    const retry = await request(app.getHttpServer())
      .post('/charges')
      .set('X-Account', 'acct_race')
      .set('Idempotency-Key', 'race-1')
      .send(body);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replay']).toBe('true');
    expect(retry.body.id).toBe(created[0].body.id);
  });
});
