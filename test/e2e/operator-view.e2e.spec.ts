import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';
import request from 'supertest';
import { describeWith, requireService } from '../support/required-service.js';
import { ALICE, postCharge, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { stopProcess } from '../support/spawned-processes.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The page's operator view in headless Chromium: keys by state, one key's attempt and lease, and releasing a key
 * left in progress by a process SIGKILLed mid-charge; its routes answer only the operator's token, never an API key.
 */
const CHROMIUM = '/usr/bin/chromium';
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update'];
const OPERATOR_TOKEN = `operator-${randomUUID()}`;
const chromiumInstalled = await requireService('Chromium', async () =>
  existsSync(CHROMIUM) ? undefined : `Chromium is not installed at ${CHROMIUM} (Debian package chromium)`,
);

let db: TestDatabase;
let app: Awaited<ReturnType<typeof startSampleApp>>;
/** In standard mode: a step's recovery point commits on its own, and outlives a release (a 503). */
let standard: Awaited<ReturnType<typeof startSampleApp>>;
const account = `sk_test_operator_view_${randomUUID().slice(0, 8)}`;
const stuckKey = `stuck-${randomUUID()}`;
const completedKey = `completed-${randomUUID()}`;
const charge = { amount: 900, currency: 'eur' };

beforeAll(async () => {
  db = await createTestDatabase();
  app = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 4, operatorToken: OPERATOR_TOKEN });
  standard = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 4, transactional: false });
  // A process whose provider never answers, SIGKILLed once its claim is made: its key stays in progress.
  const doomed = await spawnSampleApp({
    DATABASE_URL: db.url,
    PROVIDER_DELAY_MS: '600000',
    IDEMPOTENCY_LEASE_SECONDS: '1',
    IDEMPOTENCY_TRANSACTIONAL: 'false',
  });
  try {
    void postCharge(doomed.url, charge, stuckKey, account).catch(() => undefined);
    // Its first step recorded: it waits for the provider inside the second.
    await waitFor(
      async () =>
        (
          await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND steps IS NOT NULL', [
            stuckKey,
          ])
        )[0],
      'the first step',
    );
  } finally {
    await stopProcess(doomed.child);
  }
  expect((await postCharge(app.url, charge, completedKey, account)).status).toBe(201);
}, 120_000);

afterAll(async () => {
  await app?.close();
  await standard?.close();
  await db?.drop();
});

describe("the sample app's operator routes", () => {
  it('answers its routes to the operator token only: not to an API key, not without the token', async () => {
    const withApiKey = await request(app.url).get('/operator/records').set('X-API-Key', ALICE);
    expect(withApiKey.status).toBe(401);
    expect(withApiKey.body.error.code).toBe('operator_token_invalid');
    const withBearer = await request(app.url).get('/operator/records').set('Authorization', `Bearer ${ALICE}`);
    expect(withBearer.status).toBe(401);
    const withToken = await request(app.url).get('/operator/records').set('X-Operator-Token', OPERATOR_TOKEN);
    expect(withToken.status).toBe(200);
    expect(withToken.body.counts).toMatchObject({ completed: 1 });
  });

  it('refuses a release for another attempt than the one holding the key, and a release of a completed record', async () => {
    const release = (key: string, attempt: string) =>
      request(app.url)
        .post('/operator/release')
        .set('X-Operator-Token', OPERATOR_TOKEN)
        .send({ account, endpoint: 'POST /v1/charges', key, attempt });
    expect((await release(stuckKey, randomUUID())).body).toMatchObject({ outcome: 'other-attempt' });
    const [{ attempt }] = await db.query<{ attempt: string }>(
      'SELECT attempt::text FROM idempotency_records WHERE idempotency_key = $1',
      [completedKey],
    );
    expect((await release(completedKey, attempt)).body).toMatchObject({ outcome: 'completed' });
    const missing = await request(app.url).post('/operator/release').set('X-Operator-Token', OPERATOR_TOKEN).send({});
    expect(missing.status).toBe(400);
  });

  it("shows a key's steps by name, and releases a record kept with its steps (a 503 in standard mode), steps and all", async () => {
    const operator = (path: string) =>
      request(app.url).get(`/operator/${path}`).set('X-Operator-Token', OPERATOR_TOKEN);
    // Killed inside its second step: the first one is its recovery point.
    expect((await operator(`records/${stuckKey}`)).body.records).toEqual([
      expect.objectContaining({ key: stuckKey, steps: ['create-charge'] }),
    ]);

    const key = `provider-down-${randomUUID()}`;
    expect((await postCharge(standard.url, { ...charge, source: 'tok_providerDown' }, key, account)).status).toBe(503);
    const [kept] = (await operator(`records/${key}`)).body.records;
    expect(kept).toMatchObject({ state: 'lease-lapsed', status: 'in_progress', steps: ['create-charge'] });
    const release = (attempt: string) =>
      request(app.url)
        .post('/operator/release')
        .set('X-Operator-Token', OPERATOR_TOKEN)
        .send({ account, endpoint: 'POST /v1/charges', key, attempt });
    expect((await release(randomUUID())).body).toMatchObject({ outcome: 'other-attempt' });
    expect((await release(kept.attempt)).body).toEqual({ outcome: 'released' });
    expect((await operator(`records/${key}`)).body.records).toEqual([]);
    // Another request of the key is a new claim, run from its first step.
    const next = await postCharge(standard.url, { ...charge, amount: 950 }, key, account);
    expect(next.status).toBe(201);
    expect(next.headers['idempotent-replay']).toBeUndefined();
  });

  it('lists the charges the completer gave up on (claimed its maxAttempts times, 5), no other, and releases one', async () => {
    const key = `gave-up-${randomUUID()}`;
    expect((await postCharge(standard.url, { ...charge, source: 'tok_providerDown' }, key, account)).status).toBe(503);
    const gaveUp = async () =>
      (await request(app.url).get('/operator/records?state=gave-up').set('X-Operator-Token', OPERATOR_TOKEN)).body
        .records as Array<{ key: string; attempt: string }>;
    await expect(gaveUp()).resolves.toEqual([]);
    // As five attempts would have left it: the client's and four of the completer's.
    await db.query('UPDATE idempotency_records SET attempts = 5 WHERE idempotency_key = $1', [key]);
    const [listed] = await gaveUp();
    expect(listed).toMatchObject({ key, state: 'lease-lapsed', attempts: 5, steps: ['create-charge'] });
    // And the operator releases it, as any stuck key.
    const release = await request(app.url)
      .post('/operator/release')
      .set('X-Operator-Token', OPERATOR_TOKEN)
      .send({ account, endpoint: 'POST /v1/charges', key, attempt: listed.attempt });
    expect(release.body).toEqual({ outcome: 'released' });
    await expect(gaveUp()).resolves.toEqual([]);
  });
});

describeWith(chromiumInstalled, "the page's operator view in headless Chromium", () => {
  let browser: Browser;

  beforeAll(async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
  });

  afterAll(async () => {
    await browser?.close();
  });

  it('lists the stuck key, shows its attempt, steps and lease, and releases it fenced on that attempt', async () => {
    const page = await browser.newPage();
    try {
      await page.goto(app.url);
      await page.fill('#operator-token', 'sk_test_not_an_operator');
      await page.click('#operator-load');
      await page.waitForSelector('#operator-message:has-text("401")');

      await page.fill('#operator-token', OPERATOR_TOKEN);
      const stuckRow = `#operator-records tr[data-key="${stuckKey}"]`;
      // The killed attempt's lease (1 s) lapses: until then its key is running, not stuck.
      await waitFor(async () => {
        await page.click('#operator-load');
        await page.waitForSelector('#operator-counts:not(:empty)');
        return (await page.locator(stuckRow).count()) === 1 ? true : undefined;
      }, 'the stuck key in the view');
      expect(await page.locator(stuckRow).getAttribute('data-state')).toBe('lease-lapsed');
      await expect(page.locator(stuckRow).textContent()).resolves.toContain('create-charge (1)');
      expect(await page.textContent('#operator-counts')).toMatch(/lease-lapsed: 1/);

      await page.selectOption('#operator-state', 'completed');
      await page.click('#operator-load');
      await page.waitForSelector(`#operator-records tr[data-key="${completedKey}"]`);
      expect(await page.locator(`#operator-records tr[data-key="${completedKey}"] button.release`).count()).toBe(0);

      await page.fill('#operator-key', stuckKey);
      await page.click('#operator-inspect');
      await page.waitForSelector(stuckRow);
      const attempt = await page.locator(stuckRow).getAttribute('data-attempt');
      const [record] = await db.query<{ attempt: string; locked_until: Date }>(
        'SELECT attempt::text, locked_until FROM idempotency_records WHERE idempotency_key = $1',
        [stuckKey],
      );
      expect(attempt).toBe(record.attempt);
      await expect(page.locator(stuckRow).textContent()).resolves.toContain(record.locked_until.toISOString());

      await page.click(`${stuckRow} button.release`);
      await page.waitForSelector(`#operator-message:has-text("${stuckKey}: released")`);
      expect(await page.locator(stuckRow).count()).toBe(0);
    } finally {
      await page.close();
    }
    // Deleted, its step too: not kept for the request to resume.
    expect(await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [stuckKey])).toEqual([]);
    // Released: the client's retry runs the charge rather than answering 409.
    const retry = await postCharge(app.url, charge, stuckKey, account);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replay']).toBeUndefined();
  });
});
