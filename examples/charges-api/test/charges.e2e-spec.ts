import type { INestApplication } from '@nestjs/common';
import type pg from 'pg';
import request from 'supertest';
import { createTestDatabase, startApp, type TestDatabase } from './support.js';

describe('POST /charges with an Idempotency-Key', () => {
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

  const post = (account: string, key: string | undefined, body: object) => {
    const req = request(app.getHttpServer()).post('/charges').set('X-Account', account);
    if (key !== undefined) req.set('Idempotency-Key', key);
    return req.send(body);
  };

  const chargeRows = async (account?: string) =>
    (
      await db.query<{ id: string; account: string; status: string }>(
        `SELECT id, account, status FROM charges ${account ? 'WHERE account = $1' : ''} ORDER BY created_at`,
        account ? [account] : [],
      )
    ).rows;

  it('runs a charge once and replays it, byte for byte, to a retry', async () => {
    const body = { amount: 1200, currency: 'eur', description: 'order 42' };
    const first = await post('acct_replay', 'order-42', body);
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replay']).toBeUndefined();
    expect(first.body).toMatchObject({ account: 'acct_replay', amount: 1200, currency: 'eur', status: 'succeeded' });

    const retry = await post('acct_replay', 'order-42', body);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replay']).toBe('true');
    expect(retry.text).toBe(first.text);
    expect(retry.headers['content-type']).toBe(first.headers['content-type']);

    expect(await chargeRows('acct_replay')).toEqual([
      { id: first.body.id, account: 'acct_replay', status: 'succeeded' },
    ]);
  });

  it('refuses the same key with another body: 422 idempotency_key_reuse, and nothing runs', async () => {
    const first = await post('acct_reuse', 'order-43', { amount: 500, currency: 'eur' });
    expect(first.status).toBe(201);

    const reuse = await post('acct_reuse', 'order-43', { amount: 9900, currency: 'eur' });
    expect(reuse.status).toBe(422);
    expect(reuse.body).toMatchObject({ statusCode: 422, error: 'idempotency_key_reuse' });
    expect(typeof reuse.body.message).toBe('string');
    expect(reuse.headers['idempotent-replay']).toBeUndefined();

    expect(await chargeRows('acct_reuse')).toHaveLength(1);
  });

  it('scopes keys by account: the same key from two accounts is two charges', async () => {
    const body = { amount: 700, currency: 'usd' };
    const a = await post('acct_scope_a', 'shared-key', body);
    const b = await post('acct_scope_b', 'shared-key', body);
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.headers['idempotent-replay']).toBeUndefined();
    expect(a.body.id).not.toBe(b.body.id);
    expect(a.body.account).toBe('acct_scope_a');
    expect(b.body.account).toBe('acct_scope_b');

    expect(await chargeRows('acct_scope_a')).toHaveLength(1);
    expect(await chargeRows('acct_scope_b')).toHaveLength(1);
  });

  it('refuses a request without a key: 400 idempotency_key_required, and nothing runs', async () => {
    const res = await post('acct_nokey', undefined, { amount: 100, currency: 'eur' });
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({ statusCode: 400, error: 'idempotency_key_required' });
    expect(await chargeRows('acct_nokey')).toHaveLength(0);
  });

  it('leaves a request its guard refuses to the guard: 401, the key untouched', async () => {
    const refused = await request(app.getHttpServer())
      .post('/charges')
      .set('Idempotency-Key', 'order-44')
      .send({ amount: 100, currency: 'eur' });
    expect(refused.status).toBe(401);
    const records = await db.query(`SELECT 1 FROM idempotency_records WHERE idempotency_key = 'order-44'`);
    expect(records.rowCount).toBe(0);
  });

  it('releases a key whose request was invalid (400), so that the corrected request runs', async () => {
    const invalid = await post('acct_invalid', 'order-45', { amount: -1, currency: 'eur' });
    expect(invalid.status).toBe(400);
    // The same key with the corrected body is a new request, not a reuse: the 400 was released, not stored.
    const corrected = await post('acct_invalid', 'order-45', { amount: 100, currency: 'eur' });
    expect(corrected.status).toBe(201);
    expect(corrected.headers['idempotent-replay']).toBeUndefined();
    expect(await chargeRows('acct_invalid')).toHaveLength(1);
  });
});
