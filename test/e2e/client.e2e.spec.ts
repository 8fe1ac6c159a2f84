import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { createIdempotentClient } from '../../src/client/index.js';
import { PLATFORMS, startSampleApp } from '../support/sample-app.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

const chargesOf = async (account: string) =>
  db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [account]);

describe.each(PLATFORMS)('the client half against the sample app, on %s', (platform) => {
  let app: Awaited<ReturnType<typeof startSampleApp>>;
  let proxy: TcpProxy;

  beforeAll(async () => {
    app = await startSampleApp({ databaseUrl: db.url, platform });
    proxy = await TcpProxy.to(app.url);
  });

  afterAll(async () => {
    await proxy?.close();
    await app?.close();
  });

  it('runs on the platform', () => {
    expect(app.app.getHttpAdapter().getType()).toBe(platform);
  });

  it('recovers a response lost on the wire: one charge, and the retry gets the replayed answer', async () => {
    const account = `sk_test_client_${randomUUID().slice(0, 8)}`;
    const client = createIdempotentClient({
      baseUrl: proxy.urlFor(app.url),
      headers: { 'X-API-Key': account },
      retry: { baseDelayMs: 20 },
    });
    proxy.dropNextResponse();
    const result = await client.post('/v1/charges', { amount: 1500, currency: 'eur' });
    expect(result).toMatchObject({ replayed: true, attempts: 2 });
    expect(result.response.status).toBe(201);
    const charge = (await result.response.json()) as { id: string };
    await expect(chargesOf(account)).resolves.toEqual([{ id: charge.id }]);
  });

  it('gets a first answer, not a replay, when nothing is lost', async () => {
    const account = `sk_test_client_${randomUUID().slice(0, 8)}`;
    const client = createIdempotentClient({ baseUrl: app.url, headers: { Authorization: `Bearer ${account}` } });
    const result = await client.post('/v1/charges', { amount: 100, currency: 'eur' });
    expect(result).toMatchObject({ replayed: false, attempts: 1 });
    await expect(chargesOf(account)).resolves.toHaveLength(1);
  });

  it("the page's toggle drops the first answer in the app itself; the retry replays it", async () => {
    const account = `sk_test_client_${randomUUID().slice(0, 8)}`;
    const client = createIdempotentClient({
      baseUrl: app.url,
      headers: { 'X-API-Key': account },
      retry: { baseDelayMs: 20 },
    });
    const result = await client.post(
      '/v1/charges',
      { amount: 900, currency: 'eur' },
      { headers: { 'X-Demo-Drop-Response': 'once' } },
    );
    expect(result).toMatchObject({ replayed: true, attempts: 2 });
    await expect(chargesOf(account)).resolves.toHaveLength(1);
  });

  it('serves the page and the client modules it imports', async () => {
    const page = await request(app.url).get('/').expect(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.text).toContain("from '/assets/client/index.js'");
    const module = await request(app.url).get('/assets/client/index.js').expect(200);
    expect(module.headers['content-type']).toMatch(/javascript/);
    expect(module.text).toContain("from './with-retries.js'");
    await request(app.url).get('/assets/client/..%2F..%2Fpackage.js').expect(404);
    await request(app.url).get('/assets/client/nope.js').expect(404);
    // What the client shares with the server is served beside it; nothing else of src/ is.
    expect(module.text).toContain("from '../shared/canonical-json.js'");
    await request(app.url).get('/assets/shared/canonical-json.js').expect(200);
    await request(app.url).get('/assets/protocol/idempotency-run.js').expect(404);
  });
});
