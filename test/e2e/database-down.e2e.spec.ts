import { randomUUID } from 'node:crypto';
import request from 'supertest';
import type { PaymentProvider } from '../../sample-app/payment-provider.js';
import { postCharge, sampleAppLogger, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

/** Counts the charges that reach the provider: none may while no claim can be made. */
class CountingPaymentProvider implements PaymentProvider {
  calls = 0;
  async charge(): Promise<string> {
    this.calls += 1;
    return `py_${this.calls}`;
  }

  async payout(): Promise<string> {
    throw new Error('this test makes no payouts');
  }
}

let db: TestDatabase;
let app: Awaited<ReturnType<typeof startSampleApp>>;
const provider = new CountingPaymentProvider();

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startSampleApp({ databaseUrl: db.url }, { paymentProvider: provider });
  await postCharge(app.url, { amount: 100, currency: 'eur' }, randomUUID()).expect(201);
  expect(provider.calls).toBe(1);
  // The database disappears under the running app.
  await db.drop();
});

afterAll(async () => {
  await app?.close();
});

describe('when the database is gone', () => {
  it('refuses an idempotent request with 503 idempotency_store_unavailable and Retry-After, never running the handler', async () => {
    const key = randomUUID();
    const response = await postCharge(app.url, { amount: 100, currency: 'eur' }, key).expect(503);
    expect(response.headers['retry-after']).toBe('2');
    expect(response.body).toMatchObject({ statusCode: 503, error: 'idempotency_store_unavailable' });
    expect(provider.calls).toBe(1);
    // The sample app is transactional: its transaction opens before the claim, and fails first.
    expect(sampleAppLogger.errors).toContain(
      `ERROR [Idempotency] Opening the transaction of key "${key}" of POST /v1/charges failed (the store is unavailable): ` +
        `error: database "${new URL(db.url).pathname.slice(1)}" does not exist`,
    );
  });

  it('reports itself unhealthy, saying the idempotency store does not answer', async () => {
    const response = await request(app.url).get('/health').expect(503);
    expect(response.body).toMatchObject({
      status: 'error',
      error: {
        idempotency: { status: 'down', store: 'unreachable', message: expect.stringContaining('does not exist') },
      },
    });
  });
});
