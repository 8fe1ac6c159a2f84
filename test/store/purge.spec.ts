import { type INestApplicationContext, Module } from '@nestjs/common';
import { IdempotencyKeyReuseError, type IdempotencyModuleOptions, IdempotencyService } from '../../src/index.js';
import { IdempotencyLifecycle } from '../../src/protocol/idempotency-lifecycle.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestContext } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

let db: TestDatabase;
const logger = new RecordingLogger();
const contexts: INestApplicationContext[] = [];

const PURGE_SETTINGS = 'PURGE_SETTINGS';

async function startModule(options: IdempotencyModuleOptions): Promise<IdempotencyService> {
  @Module({ providers: [{ provide: PURGE_SETTINGS, useValue: options }], exports: [PURGE_SETTINGS] })
  class SettingsModule {}

  // forRootAsync on a named data source: options come from an injected provider of an imported module.
  const { context } = await startTestContext({
    database: db,
    dataSourceName: 'records',
    idempotencyAsync: {
      imports: [SettingsModule],
      inject: [PURGE_SETTINGS],
      useFactory: (settings: IdempotencyModuleOptions) => ({ accountResolver: () => 'acct', ...settings }),
    },
    logger,
  });
  contexts.push(context);
  return context.get(IdempotencyService);
}

async function insertRecords(count: number, expiresIn: string): Promise<void> {
  await db.query(
    `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, expires_at)
     SELECT 'acct', 'POST /purge', md5(random()::text), 'fp', 'completed', gen_random_uuid(), now(), now() + $1::interval
     FROM generate_series(1, $2::int)`,
    [expiresIn, count],
  );
}

const remaining = async () =>
  (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency_records'))[0].n;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  for (const context of contexts) await context.close();
  await db?.drop();
});

describe('IdempotencyService.purgeExpired', () => {
  it('deletes every expired record, batch after batch, and keeps live ones', async () => {
    const service = await startModule({ purgeBatchSize: 10 });
    await insertRecords(25, '-1 minute');
    await insertRecords(3, '1 hour');
    await expect(service.purgeExpired()).resolves.toBe(25);
    expect(await remaining()).toBe(3);
  });

  it('keeps a claim abandoned by a crash until its expiry: the same key with another input is refused, not run', async () => {
    const service = await startModule({ purgeIntervalSeconds: false });
    // Claimed by a process that died: its lease lapsed a minute ago, its expiry (a TTL after the lease) is to come.
    await db.query(
      `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at,
                                        locked_until, expires_at)
       VALUES ('acct', 'operation payout', 'abandoned', 'fp', 'in_progress', gen_random_uuid(), now() - interval '2 minutes',
               now() - interval '1 minute', now() + interval '1 hour')`,
    );
    await service.purgeExpired();
    await expect(
      db.query('SELECT status FROM idempotency_records WHERE idempotency_key = $1', ['abandoned']),
    ).resolves.toEqual([{ status: 'in_progress' }]);
    let runs = 0;
    const another = { name: 'payout', account: 'acct', key: 'abandoned', input: { amount: 999 } };
    await expect(service.execute(another, async () => (runs += 1))).rejects.toBeInstanceOf(IdempotencyKeyReuseError);
    expect(runs).toBe(0);
  });
});

/** The scheduled purge's timer, read off the module's lifecycle (the last context started). */
function purgeTimer(): NodeJS.Timeout | undefined {
  const lifecycle: object = contexts.at(-1)!.get(IdempotencyLifecycle, { strict: false });
  return (lifecycle as { purgeTimer?: NodeJS.Timeout }).purgeTimer;
}

describe('purgeIntervalSeconds', () => {
  it('starts a purge timer by default, which does not keep the process alive', async () => {
    await startModule({});
    expect(purgeTimer()?.hasRef()).toBe(false);
  });

  it('starts no timer when false', async () => {
    await startModule({ purgeIntervalSeconds: false });
    expect(purgeTimer()).toBeUndefined();
  });

  it('purges on a timer that does not keep the process alive', async () => {
    await db.query('DELETE FROM idempotency_records');
    await startModule({ purgeIntervalSeconds: 0.1, purgeBatchSize: 7 });
    expect(purgeTimer()?.hasRef()).toBe(false);
    await insertRecords(20, '-1 minute');
    await insertRecords(2, '1 hour');
    await waitFor(async () => ((await remaining()) === 2 ? true : undefined), 'the timer to purge the expired records');
  });
});
