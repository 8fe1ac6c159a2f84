import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { holdLock } from '../support/hold-lock.js';
import { PLATFORMS, postCharge, type RunningApp, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The sample app, as `npm start` runs it, gets a real SIGTERM while a charge runs; the charge's retry then goes
 * to another instance. The charge is held either inside its handler's insert, by a lock on the charges table, for as
 * long as the test says, or inside the payment provider's call, by the provider's latency (`PROVIDER_DELAY_MS`).
 * On each platform (`SAMPLE_PLATFORM`), with the other instance on the same one.
 */
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

const charge = { amount: 900, currency: 'eur' };
const CHARGED_ONCE = { charges: 1, providerCharges: 1, record: 'completed' };

/** The latency of the provider's call: how long a charge held there leaves SIGTERM to come and the drain to begin. */
const PROVIDER_DELAY_MS = '3000';

async function heldFor(account: string, key: string) {
  const [row] = await db.query<{ charges: number; providerCharges: number; record: string | null }>(
    `SELECT (SELECT count(*)::int FROM charges WHERE account = $1) AS charges,
            (SELECT count(*)::int FROM provider_charges WHERE account = $1) AS "providerCharges",
            (SELECT status FROM idempotency_records WHERE account = $1 AND idempotency_key = $2) AS record`,
    [account, key],
  );
  return row;
}

/** The charge waits on the test's lock of the charges table: it is in its handler, after the provider's call. */
async function insertWaitsOnLock(): Promise<true | undefined> {
  const [waiting] = await db.query(
    `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO "charges"%'`,
  );
  return waiting ? true : undefined;
}

/** The charge's key is claimed: its handler runs, and with `PROVIDER_DELAY_MS` it is in the provider's call. */
async function keyClaimed(account: string, key: string): Promise<true | undefined> {
  return (await heldFor(account, key)).record === 'in_progress' ? true : undefined;
}

/** Sends a charge to `app`, waits until `held` says it is held, then sends SIGTERM; resolves once the app drains. */
async function chargeThenTerminate(
  app: Awaited<ReturnType<typeof spawnSampleApp>>,
  held: (account: string, key: string) => Promise<true | undefined>,
) {
  const account = `sk_test_shutdown_${randomUUID().slice(0, 8)}`;
  const key = randomUUID();
  let output = '';
  app.child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  app.child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const answer = postCharge(app.url, charge, key, account).then(
    (response) => response,
    (error: Error) => error,
  );
  await waitFor(() => held(account, key), 'the charge to be held');
  const exited = once(app.child, 'exit') as Promise<[number | null, string | null]>;
  app.child.kill('SIGTERM');
  await waitFor(
    async () => (output.includes('Shutting down: waiting up to') ? true : undefined),
    'the app to start draining',
  );
  return { account, key, answer, exited, output: () => output };
}

/** The app exited on its own (code 0) and printed no error; its output is shown otherwise. */
async function expectCleanExit(exited: Promise<[number | null, string | null]>, output: () => string) {
  const [code] = await exited;
  expect({ code, output: output().includes('ERROR') ? output() : '' }).toEqual({ code: 0, output: '' });
}

describe.each(PLATFORMS)('graceful shutdown of a real process (SIGTERM), on %s', (platform) => {
  let survivor: RunningApp;

  beforeAll(async () => {
    survivor = await startSampleApp({ databaseUrl: db.url, platform });
  });

  afterAll(async () => {
    await survivor?.close();
  });

  /** The charge's outcome is stored: its retry, on the other instance, is its replay, and nothing is charged again. */
  async function expectReplayedElsewhere(account: string, key: string) {
    await expect(heldFor(account, key)).resolves.toEqual(CHARGED_ONCE);
    const retry = await postCharge(survivor.url, charge, key, account).expect(201);
    expect(retry.headers['idempotent-replay']).toBe('true');
    await expect(heldFor(account, key)).resolves.toEqual(CHARGED_ONCE);
  }

  it('refuses new claims with 503, lets the running charge finish and store its outcome, then exits', async () => {
    const app = await spawnSampleApp({ DATABASE_URL: db.url, SAMPLE_PLATFORM: platform });
    const lock = await holdLock(db.url, 'LOCK TABLE charges IN EXCLUSIVE MODE');
    try {
      const { account, key, answer, exited, output } = await chargeThenTerminate(app, insertWaitsOnLock);
      const refused = await postCharge(app.url, charge, randomUUID(), account);
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({
        error: 'idempotency_shutting_down',
        message: expect.stringMatching(/shutting down and takes no new idempotent requests/),
      });
      expect(refused.headers['retry-after']).toBe('2');
      // The spawned process runs on the platform: Express names itself in X-Powered-By, Fastify does not.
      expect(refused.headers['x-powered-by']).toBe(platform === 'express' ? 'Express' : undefined);

      await lock.letGo();
      const first = await answer;
      expect(first).not.toBeInstanceOf(Error);
      expect((first as { status: number }).status).toBe(201);
      await expectCleanExit(exited, output);
      await expectReplayedElsewhere(account, key);
    } finally {
      await lock.letGo();
      await app.close();
    }
  });

  // The provider ends its pool in onModuleDestroy, which Nest runs before its other shutdown hooks: the module must
  // have drained by then, or the charge's call to the provider fails (500) after SIGTERM.
  it.each([
    ['transactional', 'true'],
    ['standard', 'false'],
  ])(
    'lets a charge still in the payment provider call finish before the provider closes its pool (%s mode)',
    async (_mode, transactional) => {
      const app = await spawnSampleApp({
        DATABASE_URL: db.url,
        SAMPLE_PLATFORM: platform,
        IDEMPOTENCY_TRANSACTIONAL: transactional,
        PROVIDER_DELAY_MS,
      });
      try {
        const { account, key, answer, exited, output } = await chargeThenTerminate(app, keyClaimed);
        const first = await answer;
        expect(first).not.toBeInstanceOf(Error);
        expect(first).toMatchObject({ status: 201, body: { object: 'charge', status: 'succeeded' } });
        await expectCleanExit(exited, output);
        await expectReplayedElsewhere(account, key);
      } finally {
        await app.close();
      }
    },
  );

  it('past shutdownTimeoutSeconds, releases the claim of a charge still running (rolled back) and answers it 503', async () => {
    const app = await spawnSampleApp({
      DATABASE_URL: db.url,
      SAMPLE_PLATFORM: platform,
      IDEMPOTENCY_SHUTDOWN_TIMEOUT_SECONDS: '1',
    });
    const lock = await holdLock(db.url, 'LOCK TABLE charges IN EXCLUSIVE MODE');
    try {
      const { account, key, answer, exited } = await chargeThenTerminate(app, insertWaitsOnLock);
      const first = (await answer) as { status: number; body: unknown; headers: Record<string, string> };
      expect(first.status).toBe(503);
      // Not "takes no new requests": this one was taken, and ended.
      expect(first.body).toMatchObject({
        error: 'idempotency_shutting_down',
        message: expect.stringMatching(/shut down before this request finished, and released its key/),
      });
      expect(first.headers['retry-after']).toBe('2');
      const [code] = await exited;
      expect(code).toBe(0);
      // The key is free at once (no lease to wait out), and nothing of the attempt committed: its first step (the
      // charge row) was waiting on the lock, before the provider was called.
      await expect(heldFor(account, key)).resolves.toEqual({ charges: 0, providerCharges: 0, record: null });

      await lock.letGo();
      const retry = await postCharge(survivor.url, charge, key, account).expect(201);
      expect(retry.headers['idempotent-replay']).toBeUndefined();
      await expect(heldFor(account, key)).resolves.toEqual(CHARGED_ONCE);
    } finally {
      await lock.letGo();
      await app.close();
    }
  });
});
