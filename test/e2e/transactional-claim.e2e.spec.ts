import { randomUUID } from 'node:crypto';
import { Controller, type INestApplication, Post } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { IdempotencyContext, IdempotencyMigrations, Idempotent, IdempotencyModule } from '../../src/index.js';
import { holdLock } from '../support/hold-lock.js';
import { createPlatformApp, PLATFORMS } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/** What a transactional handler's statements run under, once its claim (with its own settings) is made. */
@Controller('settings')
class SettingsController {
  constructor(private readonly context: IdempotencyContext) {}

  @Post()
  @Idempotent({ transactional: true, maxHoldSeconds: 42 })
  async settings() {
    const [row] = await this.context.manager!.query<Array<{ lockTimeout: string; idleLimit: string }>>(
      `SELECT current_setting('lock_timeout') AS "lockTimeout",
              current_setting('idle_in_transaction_session_timeout') AS "idleLimit"`,
    );
    return row;
  }
}

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

/** An app whose connections start with `sessionSettings` (libpq `options`). */
async function startApp(platform: (typeof PLATFORMS)[number], sessionSettings: string): Promise<INestApplication> {
  const logger = new RecordingLogger();
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: db.url,
        migrations: IdempotencyMigrations,
        migrationsRun: true,
        extra: { options: sessionSettings },
      }),
      IdempotencyModule.forRoot({ singleTenant: true }),
    ],
    controllers: [SettingsController],
  })
    .setLogger(logger)
    .compile();
  const app = createPlatformApp(moduleRef, platform, { rawBody: true, logger });
  await app.listen(0, '127.0.0.1');
  return app;
}

describe.each(PLATFORMS)('the transaction a transactional claim opens, on %s', (platform) => {
  it("gives the handler the session's own lock_timeout back, and limits idleness to maxHoldSeconds", async () => {
    const app = await startApp(platform, '-c lock_timeout=7s');
    try {
      const { body } = await request(await app.getUrl())
        .post('/settings')
        .set('Idempotency-Key', randomUUID())
        .send({})
        .expect(201);
      // The claim's own wait on another attempt's lock is a millisecond: the handler's statements must not inherit it.
      expect(body).toEqual({ lockTimeout: '7s', idleLimit: '42s' });
    } finally {
      await app.close();
    }
  });

  it('waits for a lock that is not the key (here, on the table) like any statement: a new key is not a 409', async () => {
    const app = await startApp(platform, '');
    const lock = await holdLock(db.url, 'LOCK TABLE idempotency_records IN SHARE MODE');
    try {
      const answer = request(await app.getUrl())
        .post('/settings')
        .set('Idempotency-Key', randomUUID())
        .send({})
        .then((response) => response);
      // Only another attempt at the same key is answered 409 at once; this claim waits for the table.
      await waitFor(
        async () =>
          (
            await db.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
                 AND query LIKE 'BEGIN;%'`,
            )
          )[0],
        'the claim to wait for the table',
      );
      await lock.letGo();
      expect((await answer).status).toBe(201);
    } finally {
      await lock.letGo().catch(() => undefined);
      await app.close();
    }
  });

  it("keeps a session's own idle limit", async () => {
    const app = await startApp(platform, '-c idle_in_transaction_session_timeout=9s');
    try {
      const { body } = await request(await app.getUrl())
        .post('/settings')
        .set('Idempotency-Key', randomUUID())
        .send({})
        .expect(201);
      expect(body).toEqual({ lockTimeout: '0', idleLimit: '9s' });
    } finally {
      await app.close();
    }
  });
});
