import { existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { type Browser, chromium } from 'playwright-core';
import { startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

const CHROMIUM = '/usr/bin/chromium';
const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const missing = existsSync(CHROMIUM) ? undefined : `Chromium is not installed at ${CHROMIUM} (Debian package chromium)`;
if (missing) console.warn(`The browser test is skipped: ${missing}`);

(missing ? describe.skip : describe)(`the page in headless Chromium${missing ? ` (skipped: ${missing})` : ''}`, () => {
  let db: TestDatabase;
  let app: Awaited<ReturnType<typeof startSampleApp>>;
  let browser: Browser;

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSampleApp({ databaseUrl: db.url });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS });
  });

  afterAll(async () => {
    await browser?.close();
    await app?.close();
    await db?.drop();
  });

  it('charges once per click: two quick clicks, then a click whose first answer is dropped and replayed', async () => {
    const account = `sk_test_browser_${randomUUID().slice(0, 8)}`;
    const page = await browser.newPage();
    await page.goto(app.url);
    await page.fill('#api-key', account);

    await page.click('#pay');
    await page.click('#pay');
    await page.locator('#clicks li.done').nth(1).waitFor({ timeout: 15_000 });

    await page.check('#drop');
    await page.click('#pay');
    await page.locator('#clicks li.done').nth(2).waitFor({ timeout: 15_000 });

    const clicks = await page
      .locator('#clicks li.done')
      .evaluateAll((items) =>
        items.map((item) => ({ ...(item as unknown as { dataset: Record<string, string> }).dataset })),
      );
    // Newest first: the dropped click's answer came back as a replay; the two quick clicks as first answers.
    expect(clicks.map((click) => [click.status, click.replayed])).toEqual([
      ['201', 'true'],
      ['201', 'false'],
      ['201', 'false'],
    ]);
    const charges = await db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [account]);
    expect(charges.map((charge) => charge.id).sort()).toEqual(clicks.map((click) => click.charge).sort());
    await page.locator('#charges li').nth(2).waitFor({ timeout: 15_000 });
    await page.close();
  });
});
