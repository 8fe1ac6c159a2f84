import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import request from 'supertest';
import { createTestDatabase, startApp, type TestDatabase } from './support.js';

describe('transactional mode with an injected repository (enlistDataSource)', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let db: pg.Client;

  beforeAll(async () => {
    database = await createTestDatabase();
    ({ app } = await startApp(database.url));
    db = await database.connect();
  });

  afterAll(async () => {
    await db?.end();
    await app?.close();
    await database?.drop();
  });

  const charge = () =>
    request(app.getHttpServer())
      .post('/charges')
      .set('X-Account', 'acct_tx')
      .set('Idempotency-Key', 'flaky-1')
      // tok_flaky: the provider fails the first call for this key, after the service saved the charge.
      .send({ amount: 4200, currency: 'eur', source: 'tok_flaky' });

  it('rolls back the repository write of a failed attempt and releases its key; the retry writes one row', async () => {
    const failed = await charge();
    expect(failed.status).toBe(503);

    // The service's insert through @InjectRepository(Charge) rolled back with the run...
    expect((await db.query(`SELECT id FROM charges WHERE account = 'acct_tx'`)).rowCount).toBe(0);
    // ...and the key was released (its record deleted), not stored.
    const records = await db.query(`SELECT status FROM idempotency_records WHERE idempotency_key = 'flaky-1'`);
    expect(records.rowCount).toBe(0);

    // The same request again: it runs (not a replay of the 503, not a 409) and commits one charge.
    const retry = await charge();
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replay']).toBeUndefined();
    expect(retry.body).toMatchObject({ account: 'acct_tx', amount: 4200, status: 'succeeded' });
    const rows = await db.query(`SELECT id, status FROM charges WHERE account = 'acct_tx'`);
    expect(rows.rows).toEqual([{ id: retry.body.id, status: 'succeeded' }]);

    // And it is stored: a further retry is its replay.
    const replay = await charge();
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.text).toBe(retry.text);
  });
});
