import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { holdLock, waitingForLock } from '../support/hold-lock.js';
import { PLATFORMS, postCharge, type RunningApp, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The sample app, as `npm start` runs it, gets a real SIGTERM while a charge runs; the charge's retry then goes
 * to another instance. A lock on the charges table holds the charge inside its handler for as long as the test says.
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

async function heldFor(account: string, key: string) {
  const [row] = await db.query<{ charges: number; record: string | null }>(
    `SELECT (SELECT count(*)::int FROM charges WHERE account = $1) AS charges,
            (SELECT status FROM idempotency_records WHERE account = $1 AND idempotency_key = $2) AS record`,
    [account, key],
  );
  return row;
}

/** Starts the app, holds a charge in its handler, and sends SIGTERM once the app has begun to drain. */
async function chargeThenTerminate(env: Record<string, string>) {
  const account = `sk_test_shutdown_${randomUUID().slice(0, 8)}`;
  const key = randomUUID();
  const app = await spawnSampleApp({ DATABASE_URL: db.url, ...env });
  let output = '';
  app.child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  app.child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const lock = await holdLock(db.url, 'LOCK TABLE charges IN EXCLUSIVE MODE');
  const answer = postCharge(app.url, charge, key, account).then(
    (response) => response,
    (error: Error) => error,
  );
  await waitFor(waitingForLock(db, 'INSERT INTO "charges"%'), 'the charge to wait inside its handler');
  const exited = once(app.child, 'exit') as Promise<[number | null, string | null]>;
  app.child.kill('SIGTERM');
  await waitFor(
    async () => (output.includes('Shutting down: waiting up to') ? true : undefined),
    'the app to start draining',
  );
  return { app, account, key, lock, answer, exited, output: () => output };
}

describe.each(PLATFORMS)('graceful shutdown of a real process (SIGTERM), on %s', (platform) => {
  let survivor: RunningApp;

  beforeAll(async () => {
    survivor = await startSampleApp({ databaseUrl: db.url, platform });
  });

  afterAll(async () => {
    await survivor?.close();
  });

  it('refuses new claims with 503, lets the running charge finish and store its outcome, then exits', async () => {
    const { app, account, key, lock, answer, exited, output } = await chargeThenTerminate({
      SAMPLE_PLATFORM: platform,
    });
    try {
      const refused = await postCharge(app.url, charge, randomUUID(), account);
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({ error: 'idempotency_shutting_down' });
      expect(refused.headers['retry-after']).toBe('2');
      // The spawned process runs on the platform: Express names itself in X-Powered-By, Fastify does not.
      expect(refused.headers['x-powered-by']).toBe(platform === 'express' ? 'Express' : undefined);

      await lock.letGo();
      const first = await answer;
      expect(first).not.toBeInstanceOf(Error);
      expect((first as { status: number }).status).toBe(201);
      const [code] = await exited;
      expect({ code, output: output().includes('ERROR') ? output() : '' }).toEqual({ code: 0, output: '' });
      await expect(heldFor(account, key)).resolves.toEqual({ charges: 1, record: 'completed' });

      const retry = await postCharge(survivor.url, charge, key, account).expect(201);
      expect(retry.headers['idempotent-replay']).toBe('true');
      await expect(heldFor(account, key)).resolves.toEqual({ charges: 1, record: 'completed' });
    } finally {
      await app.close();
    }
  });

  it('past shutdownTimeoutSeconds, releases the claim of a charge still running (rolled back) and answers it 503', async () => {
    const { app, account, key, lock, answer, exited } = await chargeThenTerminate({
      SAMPLE_PLATFORM: platform,
      IDEMPOTENCY_SHUTDOWN_TIMEOUT_SECONDS: '1',
    });
    try {
      const first = (await answer) as { status: number; body: unknown; headers: Record<string, string> };
      expect(first.status).toBe(503);
      expect(first.body).toMatchObject({ error: 'idempotency_shutting_down' });
      expect(first.headers['retry-after']).toBe('2');
      const [code] = await exited;
      expect(code).toBe(0);
      // The key is free at once (no lease to wait out), and nothing of the attempt committed.
      await expect(heldFor(account, key)).resolves.toEqual({ charges: 0, record: null });
    } finally {
      await lock.letGo();
      await app.close();
    }
    const retry = await postCharge(survivor.url, charge, key, account).expect(201);
    expect(retry.headers['idempotent-replay']).toBeUndefined();
    await expect(heldFor(account, key)).resolves.toEqual({ charges: 1, record: 'completed' });
  });
});
