import { randomUUID } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import {
  type ClaimResult,
  type ClaimTiming,
  IdempotencyMigrations,
  IDEMPOTENCY_STORE,
  IdempotencyModule,
  IdempotencyService,
  IdempotencyShuttingDownError,
  PostgresIdempotencyStore,
  type IdempotencyScope,
  type TransactionClaimResult,
} from '../../src/index.js';
import { Gate } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

/** The real store, whose next claim (once made), waits at a gate before it answers. */
class GatedClaimStore extends PostgresIdempotencyStore {
  gate?: Gate;

  override async claimInTransaction(
    ...claiming: Parameters<PostgresIdempotencyStore['claimInTransaction']>
  ): Promise<TransactionClaimResult> {
    const result = await super.claimInTransaction(...claiming);
    await this.pass();
    return result;
  }

  override async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
  ): Promise<ClaimResult> {
    const result = await super.claim(scope, fingerprint, attempt, timing);
    await this.pass();
    return result;
  }

  /** Waits at the gate, once, if one is set. */
  private async pass(): Promise<void> {
    const gate = this.gate;
    this.gate = undefined;
    await gate?.pass();
  }
}

let db: TestDatabase;
const logger = new RecordingLogger();
const contexts: INestApplicationContext[] = [];

/** An application context on the gated store; each test shuts its own down. */
async function startContext(): Promise<INestApplicationContext> {
  const moduleRef = await Test.createTestingModule({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: db.url, migrations: IdempotencyMigrations, migrationsRun: true }),
      IdempotencyModule.forRoot({ singleTenant: true }),
    ],
  })
    .overrideProvider(IDEMPOTENCY_STORE)
    .useFactory({
      factory: (dataSource: DataSource) => new GatedClaimStore(dataSource, 'idempotency_records'),
      inject: [DataSource],
    })
    .setLogger(logger)
    .compile();
  const context = await moduleRef.init();
  contexts.push(context);
  return context;
}

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  for (const context of contexts) await context.close();
  await db?.drop();
});

describe('shutdown while a claim is on its way', () => {
  it('gives back a claim that lands once shutdown has begun, and runs nothing', async () => {
    const context = await startContext();
    const store = context.get<GatedClaimStore>(IDEMPOTENCY_STORE);
    const service = context.get(IdempotencyService);
    const gate = (store.gate = new Gate());
    const key = randomUUID();
    let runs = 0;
    const executing = service
      .execute({ name: 'payout', key }, async () => (runs += 1))
      .catch((error: unknown) => error);
    await gate.reached;
    await expect(db.query('SELECT status FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual(
      [{ status: 'in_progress' }],
    );
    await service.beforeApplicationShutdown();
    gate.release();
    await expect(executing).resolves.toBeInstanceOf(IdempotencyShuttingDownError);
    expect(runs).toBe(0);
    await expect(db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual([]);
  });
});

describe('shutdown while a transactional claim is on its way', () => {
  it('rolls back a claim that lands once shutdown has begun (the key is free), and runs nothing', async () => {
    const context = await startContext();
    const store = context.get<GatedClaimStore>(IDEMPOTENCY_STORE);
    const service = context.get(IdempotencyService);
    const gate = (store.gate = new Gate());
    const key = randomUUID();
    let runs = 0;
    const executing = service
      .execute({ name: 'payout', key }, async () => (runs += 1), { transactional: true })
      .catch((error: unknown) => error);
    await gate.reached;
    // Claimed in its transaction: held, but not to be seen.
    await expect(db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual([]);
    await service.beforeApplicationShutdown();
    gate.release();
    await expect(executing).resolves.toBeInstanceOf(IdempotencyShuttingDownError);
    expect(runs).toBe(0);
    await expect(
      db.query(
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
      ),
    ).resolves.toEqual([]);
  });
});
