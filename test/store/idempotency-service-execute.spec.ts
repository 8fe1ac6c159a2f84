import { randomUUID } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import {
  IdempotencyKeyReuseError,
  IdempotencyOperationInvalidError,
  IdempotencyOutcomeWithheldError,
  IdempotencyService,
  InMemoryIdempotencyStore,
  IdempotencyRequestInProgressError,
} from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { Gate } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestContext } from '../support/test-app.js';

let db: TestDatabase;
const logger = new RecordingLogger();
let context: INestApplicationContext;
let service: IdempotencyService;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query('CREATE TABLE payouts_made (key text PRIMARY KEY)');
  ({ context } = await startTestContext({
    database: db,
    idempotency: { accountResolver: () => 'unused for operations' },
    logger,
  }));
  service = context.get(IdempotencyService);
});

afterAll(async () => {
  await context?.close();
  await db?.drop();
});

/** The same service on the in-memory store, which takes any text as PostgreSQL's would not. */
const inMemoryService = new IdempotencyService(new InMemoryIdempotencyStore(), { singleTenant: true });

const payout = (key: string, input: object = { amount: 100 }) => ({ name: 'payout', account: 'acct_1', key, input });

describe('IdempotencyService.execute', () => {
  it('runs the work once and returns its stored result on every later call', async () => {
    const key = randomUUID();
    let runs = 0;
    const work = async () => ({ payoutId: `po_${(runs += 1)}`, at: new Date('2026-12-02T00:00:00Z') });
    const first = await service.execute(payout(key), work);
    const second = await service.execute(payout(key), work);
    expect(first).toEqual({ result: { payoutId: 'po_1', at: '2026-12-02T00:00:00.000Z' }, replayed: false });
    expect(second).toEqual({ result: first.result, replayed: true });
    expect(runs).toBe(1);
    // The result is typed as what went through JSON: the Date is a string (the suite's typecheck fails otherwise).
    const at: string = first.result.at;
    // @ts-expect-error a Date does not come back a Date
    const asDate: Date = first.result.at;
    expect([at, asDate]).toEqual(['2026-12-02T00:00:00.000Z', '2026-12-02T00:00:00.000Z']);
  });

  it('refuses an input JSON cannot represent faithfully, naming where, before claiming anything', async () => {
    const key = randomUUID();
    let runs = 0;
    const work = async () => (runs += 1);
    await expect(service.execute(payout(key, { items: [1, 2, new Map([['sku', 1]])] }), work)).rejects.toThrow(
      new TypeError(
        'input.items[2] is a Map, not a plain object or array: convert it first (a Date to its ISO string, a Map to an object, a Set to an array).',
      ),
    );
    await expect(service.execute(payout(key, { amount: 100, note: undefined }), work)).rejects.toThrow(
      /input\.note is undefined/,
    );
    expect(runs).toBe(0);
    await expect(db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1', [key])).resolves.toEqual([]);
    // Nothing holds the key: the same operation with a faithful input runs.
    await expect(service.execute(payout(key, { items: [1, 2, { sku: 1 }] }), work)).resolves.toEqual({
      result: 1,
      replayed: false,
    });
  });

  it('throws IdempotencyRequestInProgressError to a concurrent call while the work runs', async () => {
    const key = randomUUID();
    const gate = new Gate();
    const first = service.execute(payout(key), async () => {
      await gate.pass();
      return 'done';
    });
    await gate.reached;
    const refusal = service.execute(payout(key), async () => 'second');
    await expect(refusal).rejects.toBeInstanceOf(IdempotencyRequestInProgressError);
    await expect(refusal).rejects.toThrow(
      'Another attempt with this key of operation "payout" is still being processed. Retry after 2 s to receive its outcome.',
    );
    gate.release();
    await expect(first).resolves.toEqual({ result: 'done', replayed: false });
  });

  it('throws IdempotencyKeyReuseError for the same key with another input', async () => {
    const key = randomUUID();
    await service.execute(payout(key, { amount: 100 }), async () => 'paid');
    const refusal = service.execute(payout(key, { amount: 999 }), async () => 'paid');
    await expect(refusal).rejects.toBeInstanceOf(IdempotencyKeyReuseError);
    await expect(refusal).rejects.toThrow(
      'This key of operation "payout" was already used with a different input. Use a new key for a new operation.',
    );
  });

  it('scopes keys by operation name and account', async () => {
    const key = randomUUID();
    await service.execute(payout(key), async () => 'payout');
    await expect(service.execute({ ...payout(key), name: 'refund' }, async () => 'refund')).resolves.toEqual({
      result: 'refund',
      replayed: false,
    });
    await expect(service.execute({ ...payout(key), account: 'acct_2' }, async () => 'other')).resolves.toEqual({
      result: 'other',
      replayed: false,
    });
  });

  it('releases the key when the work fails, rolling back its transaction, so the next call runs again', async () => {
    const key = randomUUID();
    const failing = service.execute(
      payout(key),
      async () => {
        await context
          .get(PostgresIdempotencyContext)
          .manager!.query('INSERT INTO payouts_made (key) VALUES ($1)', [key]);
        throw new Error('the bank said no');
      },
      { transactional: true },
    );
    await expect(failing).rejects.toThrow('the bank said no');
    await expect(db.query('SELECT * FROM payouts_made WHERE key = $1', [key])).resolves.toEqual([]);
    const retried = await service.execute(
      payout(key),
      async () => {
        await context
          .get(PostgresIdempotencyContext)
          .manager!.query('INSERT INTO payouts_made (key) VALUES ($1)', [key]);
        return 'paid';
      },
      { transactional: true },
    );
    expect(retried).toEqual({ result: 'paid', replayed: false });
    await expect(db.query('SELECT * FROM payouts_made WHERE key = $1', [key])).resolves.toEqual([{ key }]);
  });

  it('refuses the call and every later one with the outcome withheld when the redact hook throws, running once', async () => {
    const key = randomUUID();
    let runs = 0;
    const redact = () => {
      throw new Error('the hook failed');
    };
    const work = async () => ({ payoutId: `po_${(runs += 1)}` });
    for (let call = 0; call < 3; call += 1) {
      await expect(service.execute(payout(key), work, { redact })).rejects.toThrow(IdempotencyOutcomeWithheldError);
    }
    expect(runs).toBe(1);
    // A later call without the hook gets the stand-in too: the work's result was never stored.
    await expect(service.execute(payout(key), work)).rejects.toThrow(IdempotencyOutcomeWithheldError);
    expect(logger.errors.splice(0)).toEqual([expect.stringMatching(/The redact hook threw .* a stand-in is stored/)]);
  });

  it('shows the work its run through PostgresIdempotencyContext', async () => {
    const key = randomUUID();
    const idempotency = context.get(PostgresIdempotencyContext);
    const { result } = await service.execute(payout(key), async (run) => ({
      sameRun: idempotency.run === run,
      key: idempotency.run?.key,
      derived: idempotency.deriveKey('bank'),
    }));
    expect(result).toMatchObject({ sameRun: true, key });
    expect(result.derived).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});

// What the HTTP edge refuses in a key, an account or an endpoint reached the database through execute() (a key too
// long for its column, a NUL character), failing each claim as if the database were down: retryable, so a job
// retried it for ever, while the in-memory store took it.
describe.each([
  ['PostgreSQL', () => service],
  ['in-memory', () => inMemoryService],
])('IdempotencyService.execute on the %s store', (_store, serviceOf) => {
  it.each([
    ['an empty key', { key: '' }, 'key', 'it is empty'],
    ['a 300-character key', { key: 'k'.repeat(300) }, 'key', 'it is longer than 255 characters'],
    [
      'a key with a NUL character',
      { key: 'order\0-42' },
      'key',
      'it may only hold visible ASCII characters (no spaces)',
    ],
    ['a key with a space', { key: 'order 42' }, 'key', 'it may only hold visible ASCII characters (no spaces)'],
    ['a key that is not a string', { key: 42 }, 'key', 'it is the number 42, not a string'],
    ['an empty name', { name: '' }, 'name', 'it is empty'],
    ['a name with a NUL character', { name: 'pay\0out' }, 'name', 'it holds a NUL character'],
    ['an empty account', { account: '' }, 'account', 'it is empty'],
    ['an account with a NUL character', { account: 'acct\0' }, 'account', 'it holds a NUL character'],
    [
      'an account with a lone surrogate',
      { account: 'acct\ud800' },
      'account',
      'it holds a lone surrogate (not well-formed Unicode)',
    ],
  ])('refuses %s for good, before anything is claimed', async (_case, change, field, reason) => {
    const before = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency_records');
    let runs = 0;
    const refusal = serviceOf()
      .execute({ ...payout(randomUUID()), ...(change as object) }, async () => (runs += 1))
      .catch((error: unknown) => error);
    const error = (await refusal) as IdempotencyOperationInvalidError;
    expect(error).toBeInstanceOf(IdempotencyOperationInvalidError);
    expect(error).toMatchObject({ code: 'idempotency_operation_invalid', field, retryAfterSeconds: undefined });
    expect(error.message).toBe(
      `The operation's ${field} is invalid: ${reason}. Nothing was claimed, and retrying will not help.`,
    );
    expect(runs).toBe(0);
    await expect(db.query('SELECT count(*)::int AS n FROM idempotency_records')).resolves.toEqual(before);
    expect(logger.errors).toEqual([]);
  });

  it('takes a 255-character key, an account without one and another with one, as the HTTP edge does', async () => {
    const key = 'k'.repeat(255);
    const { account: _none, ...withoutAccount } = payout(key);
    for (const operation of [payout(key), withoutAccount]) {
      await expect(serviceOf().execute(operation, async () => 'paid')).resolves.toEqual({
        result: 'paid',
        replayed: false,
      });
    }
  });
});

describe('the replay cache', () => {
  it('answers outcomes this process knows from memory; turned off, every replay reads the database', async () => {
    const { context: uncachedContext } = await startTestContext({
      database: db,
      idempotency: { accountResolver: () => 'unused', replayCache: false },
      logger,
    });
    try {
      const uncached = uncachedContext.get(IdempotencyService);
      const key = randomUUID();
      await service.execute(payout(key), async () => 'stored');
      await expect(uncached.execute(payout(key), async () => 'ran again')).resolves.toEqual({
        result: 'stored',
        replayed: true,
      });
      // An edit behind the module's back shows which of them read the database.
      await db.query(
        `UPDATE idempotency_records SET response_body = convert_to('"edited"', 'UTF8') WHERE idempotency_key = $1`,
        [key],
      );
      await expect(service.execute(payout(key), async () => 'ran again')).resolves.toEqual({
        result: 'stored',
        replayed: true,
      });
      await expect(uncached.execute(payout(key), async () => 'ran again')).resolves.toEqual({
        result: 'edited',
        replayed: true,
      });
      await expect(service.execute(payout(key, { amount: 999 }), async () => 'paid')).rejects.toBeInstanceOf(
        IdempotencyKeyReuseError,
      );
    } finally {
      await uncachedContext.close();
    }
  });
});
