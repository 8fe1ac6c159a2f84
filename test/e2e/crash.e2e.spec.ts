import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { postCharge, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe('a process killed mid-request', () => {
  it('leaves the key in progress until its lease lapses; then a retry takes it over and charges exactly once', async () => {
    const apiKey = 'sk_test_crash';
    const key = randomUUID();
    const charge = { amount: 700, currency: 'eur' };
    // The provider call takes far longer than the test: the process dies inside the handler.
    const doomed = await spawnSampleApp({ DATABASE_URL: db.url, PROVIDER_DELAY_MS: '600000', IDEMPOTENCY_LEASE_SECONDS: '1' });
    const survivor = await startSampleApp({ databaseUrl: db.url, leaseSeconds: 1 });
    try {
      const lost = postCharge(doomed.url, charge, key, apiKey).then(
        () => 'answered',
        () => 'connection lost',
      );
      await waitFor(
        async () => (await db.query(`SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND status = 'in_progress'`, [key]))[0],
        'the claim of the first attempt',
      );
      const exited = once(doomed.child, 'exit');
      doomed.child.kill('SIGKILL');
      await exited;
      await expect(lost).resolves.toBe('connection lost');
      await expect(db.query('SELECT count(*)::int AS n FROM charges WHERE account = $1', [apiKey])).resolves.toEqual([{ n: 0 }]);

      // While the lease holds, the retry is told to wait; once it lapses (on the database clock), the retry runs.
      const retry = await waitFor(async () => {
        const response = await postCharge(survivor.url, charge, key, apiKey);
        if (response.status === 409) return undefined;
        return response;
      }, 'the lease to lapse');
      expect(retry.status).toBe(201);
      expect(retry.headers['idempotent-replay']).toBeUndefined();

      const replay = await postCharge(survivor.url, charge, key, apiKey).expect(201);
      expect(replay.body.id).toBe(retry.body.id);
      await expect(db.query('SELECT id FROM charges WHERE account = $1', [apiKey])).resolves.toEqual([{ id: retry.body.id }]);
    } finally {
      await doomed.close();
      await survivor.close();
    }
  });
});
