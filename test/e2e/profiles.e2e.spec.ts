import { randomUUID } from 'node:crypto';
import request from 'supertest';
import Stripe from 'stripe';
import { ALICE, PLATFORMS, postCharge, startSampleApp } from '../support/sample-app.js';
import { GatedPaymentProvider } from '../support/gated-payment-provider.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

const charge = { amount: 1200, currency: 'eur', description: 'Order 42' };

describe.each(PLATFORMS)('the stripe profile, with stripe-node as the client, on %s', (platform) => {
  let db: TestDatabase;
  let app: Awaited<ReturnType<typeof startSampleApp>>;
  const provider = new GatedPaymentProvider();

  /** stripe-node pointed at the sample app; `maxNetworkRetries` as the test needs. */
  const stripeClient = (maxNetworkRetries: number) => {
    const { hostname, port } = new URL(app.url);
    return new Stripe(ALICE, { host: hostname, port: Number(port), protocol: 'http', maxNetworkRetries });
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSampleApp({ databaseUrl: db.url, platform, profile: 'stripe' }, { paymentProvider: provider });
  });

  /** The last test drops the database under the running app. */
  let dropped = false;

  afterAll(async () => {
    await app?.close();
    if (!dropped) await db?.drop();
  });

  it('replays a retry with the same key as the same charge, marked Idempotent-Replayed', async () => {
    const stripe = stripeClient(0);
    const idempotencyKey = randomUUID();
    const first = await stripe.charges.create(charge, { idempotencyKey });
    const again = await stripe.charges.create(charge, { idempotencyKey });
    expect(again.id).toBe(first.id);
    expect(first.lastResponse.headers['idempotent-replayed']).toBeUndefined();
    expect(again.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(again).toMatchObject({ object: 'charge', amount: 1200, currency: 'eur' });
  });

  it('refuses the key reused with another amount as a StripeIdempotencyError, which stripe-node does not retry', async () => {
    const stripe = stripeClient(2);
    const idempotencyKey = randomUUID();
    await stripe.charges.create(charge, { idempotencyKey });
    const responses: number[] = [];
    stripe.on('response', (event: { status: number }) => responses.push(event.status));
    const refused = await stripe.charges.create({ ...charge, amount: 1300 }, { idempotencyKey }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(refused).toMatchObject({ type: 'StripeIdempotencyError', statusCode: 400, code: 'idempotency_key_reuse' });
    expect(responses).toEqual([400]);
  });

  it('answers a concurrent attempt 409 with Stripe-Should-Retry, which stripe-node surfaces as a StripeAPIError without retries', async () => {
    const stripe = stripeClient(0);
    const idempotencyKey = randomUUID();
    const gate = provider.holdNextCharge();
    const first = stripe.charges.create(charge, { idempotencyKey });
    await gate.reached;
    const concurrent = await stripe.charges.create(charge, { idempotencyKey }).then(
      () => undefined,
      (error: unknown) => error,
    );
    gate.open();
    const created = await first;
    expect(concurrent).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(concurrent).toMatchObject({ statusCode: 409, code: 'request_in_progress', rawType: 'idempotency_error' });
    expect((concurrent as Stripe.errors.StripeError).headers).toMatchObject({
      'stripe-should-retry': 'true',
      'retry-after': '2',
    });
    // Its retry, once the first attempt is done, gets the first one's charge.
    const retried = await stripe.charges.create(charge, { idempotencyKey });
    expect(retried.id).toBe(created.id);
  });

  it('and stripe-node with retries retries through the 409 to the first attempt’s charge', async () => {
    const stripe = stripeClient(5);
    const idempotencyKey = randomUUID();
    const gate = provider.holdNextCharge();
    const first = stripe.charges.create(charge, { idempotencyKey });
    await gate.reached;
    // stripe-node emits `request` for each attempt and `response` for the last one: its second attempt is a retry
    // after a 409, and the first attempt may finish from then on.
    let attempts = 0;
    const concurrentClient = stripeClient(5);
    concurrentClient.on('request', () => {
      attempts += 1;
      if (attempts === 2) gate.open();
    });
    const concurrent = await concurrentClient.charges.create(charge, { idempotencyKey });
    expect(concurrent.id).toBe((await first).id);
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(concurrent.lastResponse.headers['idempotent-replayed']).toBe('true');
  });

  it('is sent a key by stripe-node on every POST, retries off too: a charge created without one is not refused', async () => {
    const stripe = stripeClient(0);
    const sentKeys: (string | undefined)[] = [];
    stripe.on('request', (event: { idempotency_key?: string }) => sentKeys.push(event.idempotency_key));
    const created = await stripe.charges.create(charge);
    expect(created).toMatchObject({ object: 'charge', amount: 1200 });
    expect(sentKeys).toEqual([expect.stringMatching(/^stripe-node-retry-/)]);
  });

  it('refuses a key over 255 characters as a StripeInvalidRequestError', async () => {
    const refused = await stripeClient(0)
      .charges.create(charge, { idempotencyKey: 'k'.repeat(256) })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(refused).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(refused).toMatchObject({ statusCode: 400, code: 'idempotency_key_invalid' });
  });

  it('answers 503 with Stripe-Should-Retry: true when the store is gone, which stripe-node retries, then raises', async () => {
    await db.drop();
    dropped = true;
    const stripe = stripeClient(1);
    let attempts = 0;
    stripe.on('request', () => (attempts += 1));
    const refused = await stripe.charges.create(charge, { idempotencyKey: randomUUID() }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(refused).toMatchObject({ statusCode: 503, code: 'idempotency_store_unavailable', rawType: 'api_error' });
    expect((refused as Stripe.errors.StripeError).headers).toMatchObject({ 'stripe-should-retry': 'true' });
    expect(attempts).toBe(2);
  });
});

describe.each(PLATFORMS)('the ietf profile on %s', (platform) => {
  let db: TestDatabase;
  let app: Awaited<ReturnType<typeof startSampleApp>>;
  const provider = new GatedPaymentProvider();

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSampleApp({ databaseUrl: db.url, platform, profile: 'ietf' }, { paymentProvider: provider });
  });

  /** The last test drops the database under the running app. */
  let dropped = false;

  afterAll(async () => {
    await app?.close();
    if (!dropped) await db?.drop();
  });

  const problem = (code: string, status: number, title: string) => ({
    type: `urn:nest-idempotency:problem:${code}`,
    title,
    status,
    detail: expect.any(String),
    code,
  });

  it('answers a missing key 400 with problem details', async () => {
    const response = await postCharge(app.url, charge).expect(400);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.body).toEqual(problem('idempotency_key_required', 400, 'Idempotency-Key is missing'));
  });

  it('answers a key reused with another payload 422, and replays with Idempotent-Replay', async () => {
    const key = randomUUID();
    await postCharge(app.url, charge, key).expect(201);
    const replay = await postCharge(app.url, charge, key).expect(201);
    expect(replay.headers['idempotent-replay']).toBe('true');
    const response = await postCharge(app.url, { ...charge, amount: 1300 }, key).expect(422);
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.body).toEqual(problem('idempotency_key_reuse', 422, 'Idempotency-Key is already used'));
  });

  it('answers a concurrent attempt 409 with Retry-After', async () => {
    const key = randomUUID();
    const gate = provider.holdNextCharge();
    const first = postCharge(app.url, charge, key).then((response) => response);
    await gate.reached;
    const response = await postCharge(app.url, charge, key).expect(409);
    gate.open();
    expect((await first).status).toBe(201);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.body).toEqual(
      problem('request_in_progress', 409, 'A request is outstanding for this Idempotency-Key'),
    );
  });

  it('answers 503 with Retry-After when the store is gone', async () => {
    await db.drop();
    dropped = true;
    const response = await request(app.url)
      .post('/v1/charges')
      .set('X-API-Key', ALICE)
      .set('Idempotency-Key', randomUUID())
      .send(charge)
      .expect(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(response.body).toEqual(problem('idempotency_store_unavailable', 503, 'Idempotency store is unavailable'));
  });
});
