import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import request from 'supertest';
import { ALICE, BOB, PLATFORMS, post, postCharge, startSampleApp } from '../support/sample-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';
import { GatedPaymentProvider } from '../support/gated-payment-provider.js';

const charge = { amount: 1200, currency: 'eur', description: 'Order 42' };

const db = useTestDatabase();
const provider = new GatedPaymentProvider();

describe.each(PLATFORMS)('on %s', (platform) => {
  let app: Awaited<ReturnType<typeof startSampleApp>>;

  beforeAll(async () => {
    app = await startSampleApp({ databaseUrl: db.url, ttlSeconds: 3600, platform }, { paymentProvider: provider });
  });

  afterAll(async () => {
    await app?.close();
  });

  const chargeCount = async (account = ALICE) =>
    (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE account = $1', [account]))[0].n;
  const recordOf = async (key: string) =>
    (
      await db.query(
        'SELECT status, response_status, endpoint, account FROM idempotency_records WHERE idempotency_key = $1',
        [key],
      )
    )[0];

  it('runs on the platform', () => {
    expect(app.app.getHttpAdapter().getType()).toBe(platform);
  });

  describe('a new key, then a replay', () => {
    it('creates one charge and replays the same bytes, status and headers with Idempotent-Replay', async () => {
      const key = randomUUID();
      const first = await postCharge(app.url, charge, key).expect(201);
      expect(first.body).toMatchObject({
        id: expect.stringMatching(/^ch_/),
        object: 'charge',
        amount: 1200,
        currency: 'eur',
        status: 'succeeded',
        description: 'Order 42',
      });
      expect(first.headers['idempotent-replay']).toBeUndefined();

      const replay = await postCharge(app.url, charge, key).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.headers['content-type']).toBe(first.headers['content-type']);
      expect(replay.text).toBe(first.text);
      await expect(db.query('SELECT count(*)::int AS n FROM charges WHERE id = $1', [first.body.id])).resolves.toEqual([
        { n: 1 },
      ]);
      await expect(recordOf(key)).resolves.toMatchObject({
        status: 'completed',
        response_status: 201,
        endpoint: 'POST /v1/charges',
        account: ALICE,
      });
    });

    it('reads the key in its RFC 8941 quoted form as the same key', async () => {
      const key = randomUUID();
      const first = await postCharge(app.url, charge, `"${key}"`).expect(201);
      const replay = await postCharge(app.url, charge, key).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.body.id).toBe(first.body.id);
    });

    it('replays form-encoded bodies and refuses the same key with other form values', async () => {
      const key = randomUUID();
      const first = await postCharge(app.url, 'amount=500&currency=usd', key).expect(201);
      expect(first.body).toMatchObject({ amount: 500, currency: 'usd' });
      const replay = await postCharge(app.url, 'amount=500&currency=usd', key).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      const reuse = await postCharge(app.url, 'amount=501&currency=usd', key).expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
    });
  });

  describe('a key reused for a different request', () => {
    it('is refused with 422 idempotency_key_reuse and charges nothing more', async () => {
      const key = randomUUID();
      await postCharge(app.url, charge, key).expect(201);
      const before = await chargeCount();
      const reuse = await postCharge(app.url, { ...charge, amount: 9900 }, key).expect(422);
      expect(reuse.body).toEqual({
        statusCode: 422,
        error: 'idempotency_key_reuse',
        message: expect.stringContaining('different request'),
      });
      expect(await chargeCount()).toBe(before);
    });

    it('is refused when the same bytes come as form data instead of JSON, since the content type is fingerprinted', async () => {
      const key = randomUUID();
      const bytes = JSON.stringify(charge);
      const before = await chargeCount();
      await postCharge(app.url, bytes, key).set('Content-Type', 'application/json; charset=utf-8').expect(201);
      const asForm = await postCharge(app.url, bytes, key)
        .set('Content-Type', 'application/x-www-form-urlencoded')
        .expect(422);
      expect(asForm.body.error).toBe('idempotency_key_reuse');
      // Another spelling of the same type is the same request.
      const replay = await postCharge(app.url, bytes, key)
        .set('Content-Type', 'Application/JSON ;charset=UTF-8')
        .expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(await chargeCount()).toBe(before + 1);
    });

    it('is refused when only the JSON formatting differs, since the raw bytes are fingerprinted', async () => {
      const key = randomUUID();
      await postCharge(app.url, JSON.stringify(charge), key).set('Content-Type', 'application/json').expect(201);
      await postCharge(app.url, JSON.stringify(charge, null, 2), key)
        .set('Content-Type', 'application/json')
        .expect(422);
    });

    it('is refused when only the query string differs, since the fingerprint covers the path with its query', async () => {
      const key = randomUUID();
      await post(app.url, '/v1/charges?amount=1', charge, key).expect(201);
      const reuse = await post(app.url, '/v1/charges?amount=2', charge, key).expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
    });

    it('is refused by an instance that reads the record from the database, not from its memory', async () => {
      const key = randomUUID();
      await postCharge(app.url, charge, key).expect(201);
      const other = await startSampleApp(
        { databaseUrl: db.url, ttlSeconds: 3600, platform },
        { paymentProvider: provider },
      );
      try {
        const reuse = await postCharge(other.url, { ...charge, amount: 9900 }, key).expect(422);
        expect(reuse.body.error).toBe('idempotency_key_reuse');
      } finally {
        await other.close();
      }
    });

    it('is refused while the key is still in progress: 422, not 409', async () => {
      const key = randomUUID();
      const held = provider.holdNextCharge();
      const first = postCharge(app.url, charge, key).then((response) => response);
      await held.reached;
      try {
        const reuse = await postCharge(app.url, { ...charge, amount: 9900 }, key).expect(422);
        expect(reuse.body.error).toBe('idempotency_key_reuse');
      } finally {
        held.open();
      }
      expect((await first).status).toBe(201);
    });
  });

  describe('a key still in progress', () => {
    it('answers 409 request_in_progress with Retry-After, then replays once the first attempt is done', async () => {
      const key = randomUUID();
      const held = provider.holdNextCharge();
      const first = postCharge(app.url, charge, key).then((response) => response);
      await held.reached;

      const conflict = await postCharge(app.url, charge, key).expect(409);
      expect(conflict.headers['retry-after']).toBe('2');
      expect(conflict.body).toMatchObject({ statusCode: 409, error: 'request_in_progress' });

      held.open();
      const done = await first;
      expect(done.status).toBe(201);
      const replay = await postCharge(app.url, charge, key).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.body.id).toBe(done.body.id);
    });
  });

  describe('keys that are missing or malformed', () => {
    it('refuses a POST without a key: 400 idempotency_key_required, nothing stored or charged', async () => {
      const before = await chargeCount();
      const response = await postCharge(app.url, charge).expect(400);
      expect(response.body).toMatchObject({
        error: 'idempotency_key_required',
        message: expect.stringContaining('Idempotency-Key'),
      });
      expect(await chargeCount()).toBe(before);
    });

    it.each([
      ['a space', 'two words'],
      ['256 characters', 'k'.repeat(256)],
      ['a bad quoted string', '"unterminated'],
      ['a non-ASCII character', 'cl\u00e9'],
    ])('refuses a key with %s: 400 idempotency_key_invalid', async (_case, key) => {
      const response = await postCharge(app.url, charge, key).expect(400);
      expect(response.body.error).toBe('idempotency_key_invalid');
    });

    it.each([
      ['empty', ''],
      ['of spaces only', '   '],
    ])(
      'refuses a key header sent %s as a client bug: 400 idempotency_key_invalid, not a missing key',
      async (_case, key) => {
        const before = await chargeCount();
        const response = await postCharge(app.url, charge, key).expect(400);
        expect(response.body).toMatchObject({
          error: 'idempotency_key_invalid',
          message: expect.stringContaining('it is empty'),
        });
        expect(await chargeCount()).toBe(before);
      },
    );

    it.each([
      ['twice', ['key-a', 'key-b']],
      ['empty, then with a key', ['', 'key-b']],
    ])(
      'refuses a key header sent %s: 400 idempotency_key_invalid, saying it was sent more than once',
      async (_case, keys) => {
        const before = await chargeCount();
        // Node.js's own client sends one header line per value of an array.
        const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
          const sent = httpRequest(`${app.url}/v1/charges`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'X-API-Key': ALICE, 'Idempotency-Key': keys },
          });
          sent.on('error', reject);
          sent.on('response', (response) => {
            let text = '';
            response.on('data', (chunk: Buffer) => (text += chunk.toString()));
            response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
          });
          sent.end(JSON.stringify(charge));
        });
        expect(status).toBe(400);
        expect(JSON.parse(body)).toMatchObject({
          error: 'idempotency_key_invalid',
          message: expect.stringContaining('it was sent more than once'),
        });
        expect(await chargeCount()).toBe(before);
      },
    );

    it('refuses a refund without a key too', async () => {
      const response = await post(app.url, '/v1/refunds', { charge: 'ch_x' }).expect(400);
      expect(response.body.error).toBe('idempotency_key_required');
    });
  });

  describe('scopes', () => {
    it('isolates tenants: one key from two accounts makes two charges, and neither reads the other', async () => {
      const key = randomUUID();
      const alice = await postCharge(app.url, charge, key, ALICE).expect(201);
      const bob = await postCharge(app.url, charge, key, BOB).expect(201);
      expect(bob.headers['idempotent-replay']).toBeUndefined();
      expect(bob.body.id).not.toBe(alice.body.id);

      await request(app.url).get(`/v1/charges/${alice.body.id}`).set('X-API-Key', BOB).expect(404);
      await request(app.url).get(`/v1/charges/${alice.body.id}`).set('Authorization', `Bearer ${ALICE}`).expect(200);
      const bobs = await request(app.url).get('/v1/charges?limit=100').set('X-API-Key', BOB).expect(200);
      expect(bobs.body.data.map((c: { id: string }) => c.id)).not.toContain(alice.body.id);
    });

    it('isolates endpoints: one key on charges and refunds runs both', async () => {
      const key = randomUUID();
      const created = await postCharge(app.url, charge, key).expect(201);
      const refund = await post(app.url, '/v1/refunds', { charge: created.body.id, amount: 200 }, key).expect(201);
      expect(refund.body).toEqual({
        id: expect.stringMatching(/^re_/),
        object: 'refund',
        charge: created.body.id,
        amount: 200,
      });
      expect(refund.headers['idempotent-replay']).toBeUndefined();

      const replay = await post(app.url, '/v1/refunds', { charge: created.body.id, amount: 200 }, key).expect(201);
      expect(replay.body.id).toBe(refund.body.id);
      await expect(db.query('SELECT amount_refunded FROM charges WHERE id = $1', [created.body.id])).resolves.toEqual([
        { amount_refunded: 200 },
      ]);
    });
  });

  describe('outcomes of the handler', () => {
    it('stores a declined card (402) and replays it without charging', async () => {
      const key = randomUUID();
      const before = await chargeCount();
      const declined = await postCharge(app.url, { ...charge, source: 'tok_chargeDeclined' }, key).expect(402);
      expect(declined.body).toEqual({
        error: { type: 'card_error', code: 'card_declined', message: expect.any(String) },
      });
      const replay = await postCharge(app.url, { ...charge, source: 'tok_chargeDeclined' }, key).expect(402);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(declined.text);
      expect(await chargeCount()).toBe(before);
      await expect(recordOf(key)).resolves.toMatchObject({ status: 'completed', response_status: 402 });
    });

    it('releases the key on a 503 from the provider, so a retry runs the handler again', async () => {
      const key = randomUUID();
      const body = { ...charge, source: 'tok_providerDown' };
      const first = await postCharge(app.url, body, key).expect(503);
      expect(first.body.error.code).toBe('provider_unavailable');
      await expect(recordOf(key)).resolves.toBeUndefined();
      const retry = await postCharge(app.url, body, key).expect(503);
      expect(retry.headers['idempotent-replay']).toBeUndefined();
      await expect(recordOf(key)).resolves.toBeUndefined();
    });

    it('releases the key on a validation error (400), charges nothing, and lets the corrected request run', async () => {
      const key = randomUUID();
      const before = await chargeCount();
      const invalid = await postCharge(app.url, { amount: -5, currency: 'EUR' }, key).expect(400);
      expect(invalid.body.error).toMatchObject({ type: 'invalid_request_error', param: 'amount' });
      await expect(recordOf(key)).resolves.toBeUndefined();
      expect(await chargeCount()).toBe(before);
      await postCharge(app.url, charge, key).expect(201);
      expect(await chargeCount()).toBe(before + 1);
    });

    it('never touches the store for requests refused before the handler: 401, 413, unparsable JSON', async () => {
      const key = randomUUID();
      await request(app.url).post('/v1/charges').set('Idempotency-Key', key).send(charge).expect(401);
      await request(app.url)
        .post('/v1/charges')
        .set('Authorization', 'Bearer nope')
        .set('X-API-Key', ALICE)
        .set('Idempotency-Key', key)
        .send(charge)
        .expect(401);
      const tooLarge = await postCharge(app.url, { ...charge, description: 'x'.repeat(200_000) }, key).expect(413);
      expect(tooLarge.headers['content-type']).toMatch(/json/);
      const unparsable = await postCharge(app.url, '{"amount": 12', key)
        .set('Content-Type', 'application/json')
        .expect(400);
      expect(unparsable.headers['content-type']).toMatch(/json/);
      await expect(recordOf(key)).resolves.toBeUndefined();
    });
  });

  describe('methods that are already safe', () => {
    it('pass GET through untouched, even with a malformed key', async () => {
      const list = await request(app.url)
        .get('/v1/charges?limit=2')
        .set('X-API-Key', ALICE)
        .set('Idempotency-Key', 'not a valid key')
        .expect(200);
      expect(list.body).toMatchObject({ object: 'list' });
      expect(list.body.data.length).toBeLessThanOrEqual(2);
      expect(list.headers['idempotent-replay']).toBeUndefined();
      await expect(recordOf('not a valid key')).resolves.toBeUndefined();
    });

    it('lists newest first and validates limit', async () => {
      const a = await postCharge(app.url, charge, randomUUID()).expect(201);
      const b = await postCharge(app.url, charge, randomUUID()).expect(201);
      const list = await request(app.url).get('/v1/charges?limit=2').set('X-API-Key', ALICE).expect(200);
      expect(list.body.data.map((c: { id: string }) => c.id)).toEqual([b.body.id, a.body.id]);
      await request(app.url).get('/v1/charges?limit=101').set('X-API-Key', ALICE).expect(400);
      await request(app.url).get('/v1/charges?limit=0').set('X-API-Key', ALICE).expect(400);
    });
  });

  describe('PATCH', () => {
    it('replays a PATCH with the same key, and refuses the key on another charge (422)', async () => {
      const a = (await postCharge(app.url, charge, randomUUID()).expect(201)).body.id;
      const b = (await postCharge(app.url, charge, randomUUID()).expect(201)).body.id;
      const key = randomUUID();
      const patch = (id: string, description: string) =>
        request(app.url)
          .patch(`/v1/charges/${id}`)
          .set('X-API-Key', ALICE)
          .set('Idempotency-Key', key)
          .send({ description });

      const first = await patch(a, 'first').expect(200);
      expect(first.body).toMatchObject({ id: a, description: 'first' });
      await request(app.url)
        .patch(`/v1/charges/${a}`)
        .set('X-API-Key', ALICE)
        .send({ description: 'without a key' })
        .expect(200);
      const replay = await patch(a, 'first').expect(200);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      const reuse = await patch(b, 'first').expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
    });
  });

  describe('TTL', () => {
    /** The sample app with records kept for a second (the test closes it). */
    const startShortLived = () =>
      startSampleApp({ databaseUrl: db.url, ttlSeconds: 1, platform }, { paymentProvider: provider });

    it('keeps a record for the configured TTL from completion', async () => {
      const key = randomUUID();
      const first = await postCharge(app.url, charge, key).expect(201);
      const [{ ttl_seconds }] = await db.query<{ ttl_seconds: number }>(
        'SELECT extract(epoch FROM expires_at - completed_at)::int AS ttl_seconds FROM idempotency_records WHERE idempotency_key = $1',
        [key],
      );
      expect(ttl_seconds).toBe(3600);
      expect((await postCharge(app.url, charge, key).expect(201)).body.id).toBe(first.body.id);
    });

    it('counts from completion: a transactional run that outlasts the TTL is replayed to an immediate retry', async () => {
      const shortLived = await startShortLived();
      try {
        const key = randomUUID();
        const held = provider.holdNextCharge();
        const first = postCharge(shortLived.url, charge, key).then((response) => response);
        await held.reached;
        // The run's transaction began right after its claim: hold the handler until, by the database's clock, it has
        // run longer than the TTL.
        await waitFor(
          async () =>
            (
              await db.query(
                `SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND created_at < now() - interval '1.5 s'`,
                [key],
              )
            )[0],
          'the run to outlast its TTL',
        );
        held.open();
        expect((await first).status).toBe(201);
        const charges = await chargeCount();
        const retry = await postCharge(shortLived.url, charge, key).expect(201);
        expect(retry.headers['idempotent-replay']).toBe('true');
        expect(retry.body.id).toBe((await first).body.id);
        expect(await chargeCount()).toBe(charges);
      } finally {
        await shortLived.close();
      }
    });

    it('replays (from memory too) only until the record expires, then runs the handler again', async () => {
      const shortLived = await startShortLived();
      try {
        const key = randomUUID();
        const first = await postCharge(shortLived.url, charge, key).expect(201);
        // An edit behind the module's back shows that the replay comes from memory.
        await db.query(
          `UPDATE idempotency_records SET response_body = convert_to('{}', 'UTF8') WHERE idempotency_key = $1`,
          [key],
        );
        const replay = await postCharge(shortLived.url, charge, key).expect(201);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(first.text);
        await waitFor(
          async () =>
            (
              await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND expires_at <= now()', [
                key,
              ])
            )[0],
          'the record to expire',
        );
        const after = await postCharge(shortLived.url, charge, key).expect(201);
        expect(after.headers['idempotent-replay']).toBeUndefined();
        expect(after.body.id).not.toBe(first.body.id);
      } finally {
        await shortLived.close();
      }
    });
  });

  describe('refunds', () => {
    it("refund what is left by default, never more, and never another account's charge", async () => {
      const id = (await postCharge(app.url, { amount: 1000, currency: 'eur' }, randomUUID()).expect(201)).body.id;
      await post(app.url, '/v1/refunds', { charge: id }, randomUUID(), BOB).expect(400);
      await post(app.url, '/v1/refunds', { charge: id, amount: 1001 }, randomUUID()).expect(400);
      const partial = await post(app.url, '/v1/refunds', { charge: id, amount: 300 }, randomUUID()).expect(201);
      expect(partial.body.amount).toBe(300);
      const rest = await post(app.url, '/v1/refunds', { charge: id }, randomUUID()).expect(201);
      expect(rest.body.amount).toBe(700);
      const nothingLeft = await post(app.url, '/v1/refunds', { charge: id }, randomUUID()).expect(400);
      expect(nothingLeft.body.error.type).toBe('invalid_request_error');
      await expect(
        db.query('SELECT sum(amount)::int AS total FROM refunds WHERE charge_id = $1', [id]),
      ).resolves.toEqual([{ total: 1000 }]);
    });
  });

  describe('health', () => {
    it('answers 200 without an API key while the database answers', async () => {
      const response = await request(app.url).get('/health').expect(200);
      expect(response.body).toMatchObject({
        status: 'ok',
        info: { idempotency: { status: 'up', store: 'reachable' } },
      });
    });
  });
});
