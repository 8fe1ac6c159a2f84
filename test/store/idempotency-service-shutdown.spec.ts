import { randomUUID } from 'node:crypto';
import { jest } from '@jest/globals';
import type { INestApplicationContext } from '@nestjs/common';
import { IdempotencyService, IdempotencyShuttingDownError, type IdempotencyScope } from '../../src/index.js';
import { type ClaimResult, type ClaimTiming, IDEMPOTENCY_STORE, type StoreTransaction } from '../../src/store/index.js';
import { PostgresIdempotencyStore, type PostgresStoreTransaction } from '../../src/postgres/index.js';
import { Gate } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestContext } from '../support/test-app.js';

/**
 * The real store, whose next claim (once committed), or next transaction, waits at a gate before it answers. While
 * a transaction gate is set, no transaction opens before a claim (as when every slot is taken): the attempt opens
 * its transaction after its claim, at the gate.
 */
class GatedClaimStore extends PostgresIdempotencyStore {
  gate?: Gate;
  transactionGate?: Gate;

  override async beginHoldingTransaction(scope: IdempotencyScope): Promise<PostgresStoreTransaction | undefined> {
    return this.transactionGate ? undefined : super.beginHoldingTransaction(scope);
  }

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
    holder?: StoreTransaction,
  ): Promise<ClaimResult> {
    const result = await super.claim(scope, fingerprint, attempt, timing, holder);
    const gate = this.gate;
    this.gate = undefined;
    await gate?.pass();
    return result;
  }
}

let db: TestDatabase;
const logger = new RecordingLogger();
let context: INestApplicationContext;

/** The module on the test database, with the gated store in place of the real one. */
const startGated = () =>
  startTestContext({
    database: db,
    overrideStore: (dataSource) => new GatedClaimStore(dataSource, 'idempotency_records'),
    idempotency: { singleTenant: true },
    logger,
  });

/** Runs `test` on a module of its own (one whose drain the others do not share), closed after it. */
async function inAContextOfItsOwn(
  test: (module: { store: GatedClaimStore; service: IdempotencyService }) => Promise<void>,
): Promise<void> {
  const { context: own } = await startGated();
  try {
    await test({ store: own.get<GatedClaimStore>(IDEMPOTENCY_STORE), service: own.get(IdempotencyService) });
  } finally {
    await own.close();
  }
}

beforeAll(async () => {
  db = await createTestDatabase();
  ({ context } = await startGated());
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
  it('waits for it, and it is given back (rolled back, released) before shutdown completes', () =>
    inAContextOfItsOwn(async ({ store, service }) => {
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
    }));
});

describe('a new claim once the drain has begun', () => {
  it("is refused before it listens for an outcome it would wait for (inFlight: 'wait')", () =>
    inAContextOfItsOwn(async ({ store, service }) => {
      await service.drain();
      const listening = jest.spyOn(store, 'waitForChange');
      await expect(
        service.execute({ name: 'payout', key: randomUUID() }, () => Promise.resolve(1), { inFlight: 'wait' }),
      ).rejects.toBeInstanceOf(IdempotencyShuttingDownError);
      expect(listening).not.toHaveBeenCalled();
    }));
});
