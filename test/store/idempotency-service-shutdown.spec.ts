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
  type PostgresStoreTransaction,
} from '../../src/index.js';
import { Gate } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

/** The real store, whose next claim (once committed), or next transaction, waits at a gate before it answers. */
class GatedClaimStore extends PostgresIdempotencyStore {
  gate?: Gate;
  transactionGate?: Gate;

  override async beginTransaction(timeoutMs?: number): Promise<PostgresStoreTransaction> {
    const gate = this.transactionGate;
    this.transactionGate = undefined;
    await gate?.pass();
    return super.beginTransaction(timeoutMs);
  }

  override async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
  ): Promise<ClaimResult> {
    const result = await super.claim(scope, fingerprint, attempt, timing);
    const gate = this.gate;
    this.gate = undefined;
    await gate?.pass();
    return result;
  }
}

let db: TestDatabase;
const logger = new RecordingLogger();
let context: INestApplicationContext;

beforeAll(async () => {
  db = await createTestDatabase();
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
  context = await moduleRef.init();
});

afterAll(async () => {
  await context?.close();
  await db?.drop();
});

describe('shutdown while a claim is on its way', () => {
  it('gives back a claim that lands once shutdown has begun, and runs nothing', async () => {
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
    await service.drain();
    gate.release();
    await expect(executing).resolves.toBeInstanceOf(IdempotencyShuttingDownError);
    expect(runs).toBe(0);
    await expect(db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual([]);
  });
});

describe('shutdown while an attempt waits for its transaction', () => {
  it('waits for it, and it is given back (rolled back, released) before shutdown completes', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url }),
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
    const app = await moduleRef.init();
    try {
      const store = app.get<GatedClaimStore>(IDEMPOTENCY_STORE);
      const service = app.get(IdempotencyService);
      const gate = (store.transactionGate = new Gate());
      const key = randomUUID();
      const executing = service
        .execute({ name: 'payout', key }, async () => 'ran', { transactional: true })
        .catch((error: unknown) => error);
      await gate.reached;
      const draining = service.drain();
      gate.release();
      await draining;
      // Given back by the time the drain ends (rolled back, released); its caller is refused.
      await expect(db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual(
        [],
      );
      await expect(executing).resolves.toBeInstanceOf(IdempotencyShuttingDownError);
    } finally {
      await app.close();
    }
  });
});
