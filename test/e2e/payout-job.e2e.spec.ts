import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { waitingForLock } from '../support/hold-lock.js';
import { post, spawnSampleApp, startSampleApp } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describe('the payout job, under IdempotencyService.execute', () => {
  it('is paid once when its worker is killed mid-job and another worker picks it up', async () => {
    const account = 'sk_test_payouts';
    const api = await startSampleApp({ databaseUrl: db.url });
    const created = await post(api.url, '/v1/payouts', { amount: 2500, currency: 'eur' }, randomUUID(), account).expect(
      201,
    );
    expect(created.body).toMatchObject({ id: expect.stringMatching(/^po_/), object: 'payout', status: 'pending' });
    await api.close();

    // The job is paid at the provider, then its worker stalls before marking it paid, and dies.
    const locker = new pg.Client({ connectionString: db.url });
    await locker.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE payout_jobs IN EXCLUSIVE MODE');
    const application = `doomed_worker_${randomUUID().slice(0, 8)}`;
    const doomedUrl = new URL(db.url);
    doomedUrl.searchParams.set('application_name', application);
    const workerEnv = { PAYOUT_WORKER: 'true', PAYOUT_POLL_MS: '50', IDEMPOTENCY_LEASE_SECONDS: '1' };
    const doomed = await spawnSampleApp({ ...workerEnv, DATABASE_URL: doomedUrl.toString() });
    try {
      await waitFor(
        async () => (await db.query('SELECT 1 FROM provider_payouts WHERE account = $1', [account]))[0],
        'the provider to pay out',
      );
      await waitFor(waitingForLock(db, 'UPDATE "payout_jobs"%'), 'the worker to wait to mark the job paid');
      const exited = once(doomed.child, 'exit');
      doomed.child.kill('SIGKILL');
      await exited;
      await db.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [
        application,
      ]);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
      await doomed.close();
    }
    await expect(db.query('SELECT status FROM payout_jobs WHERE id = $1', [created.body.id])).resolves.toEqual([
      { status: 'pending' },
    ]);

    const restarted = await spawnSampleApp({ ...workerEnv, DATABASE_URL: db.url });
    try {
      const [job] = await waitFor(async () => {
        const rows = await db.query<{ provider_payout_id: string }>(
          `SELECT provider_payout_id FROM payout_jobs WHERE id = $1 AND status = 'paid'`,
          [created.body.id],
        );
        return rows.length ? rows : undefined;
      }, 'the restarted worker to pay the job');
      const payouts = await db.query<{ id: string }>('SELECT id FROM provider_payouts WHERE account = $1', [account]);
      expect(payouts).toEqual([{ id: job.provider_payout_id }]);
    } finally {
      await restarted.close();
    }
  });
});
