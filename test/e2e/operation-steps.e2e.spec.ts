import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Controller, Headers, Post } from '@nestjs/common';
import request from 'supertest';
import {
  Idempotent,
  IdempotencyContext,
  type IdempotencyRun,
  IdempotencyService,
  IdempotencyStepError,
  type IdempotencyStepFault,
  IdempotencyStoreUnavailableError,
} from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import type { IdempotencyStore } from '../../src/store/index.js';
import { LedgerEntry } from '../support/ledger-entry.entity.js';
import { describeOnStores } from '../support/on-each-store.js';
import { useTestDatabase } from '../support/test-database.js';
import { holdLock } from '../support/hold-lock.js';
import {
  recordsOn,
  startTestApp,
  startTestContext,
  type StandardStore,
  type TestContext,
} from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

/**
 * Steps of `execute()`'s operations on each store: a later attempt skips the steps an earlier one recorded and gets
 * their results, the pitfalls of journaled steps are refused, a fenced attempt records nothing, and (on PostgreSQL) a
 * transactional step's writes commit with its recovery point or not at all.
 */

const db = useTestDatabase('CREATE TABLE ledger_entries (id serial PRIMARY KEY, key text NOT NULL)');

/** An error a test throws on purpose: the operation fails there, as a crash would leave it. */
class Interrupted extends Error {}

/** An `IdempotencyStepError` of `fault`, for `toMatchObject`. */
function stepFault(fault: IdempotencyStepFault): Partial<IdempotencyStepError> {
  return { name: IdempotencyStepError.name, fault };
}

describeOnStores('Steps of an operation on %s', (store: StandardStore) => {
  let app: TestContext;
  let idempotency: IdempotencyService;

  beforeAll(async () => {
    app = await startTestContext({
      ...recordsOn(store),
      database: db,
      entities: [LedgerEntry],
      idempotency: { singleTenant: true, leaseSeconds: 30 },
    });
    idempotency = app.context.get(IdempotencyService);
  });
  afterAll(() => app?.close());

  /** Counts each step's runs across attempts. */
  function stepCounter() {
    const runs = new Map<string, number>();
    return {
      runs,
      work:
        <T>(name: string, value: T) =>
        async () => {
          runs.set(name, (runs.get(name) ?? 0) + 1);
          return value;
        },
    };
  }

  it('skips on a retry the steps an earlier attempt recorded, returning their results, and runs only the rest', async () => {
    const operation = { name: 'charge', key: randomUUID(), input: { amount: 100 } };
    const { runs, work } = stepCounter();
    let failAfterCharge = true;
    const charge = async (run: IdempotencyRun) => {
      const row = await run.step('create-charge-row', work('row', { id: 7, at: new Date(0) }));
      const provider = await run.step('charge-card', work('card', { charge: `ch_${row.id}` }));
      if (failAfterCharge) throw new Interrupted('crashed after the card was charged');
      const receipt = await run.step('send-receipt', work('receipt', undefined));
      return { row, provider, receipt };
    };

    await expect(idempotency.execute(operation, charge)).rejects.toBeInstanceOf(Interrupted);
    failAfterCharge = false;
    const { result, replayed } = await idempotency.execute(operation, charge);
    expect(replayed).toBe(false);
    // Results go through JSON on the first run and on a skip alike: the Date is its ISO string in both.
    expect(result).toEqual({
      row: { id: 7, at: '1970-01-01T00:00:00.000Z' },
      provider: { charge: 'ch_7' },
      receipt: null,
    });
    expect(Object.fromEntries(runs)).toEqual({ row: 1, card: 1, receipt: 1 });
    // Completed: replayed without running anything.
    await expect(idempotency.execute(operation, charge)).resolves.toEqual({ result, replayed: true });
    expect(Object.fromEntries(runs)).toEqual({ row: 1, card: 1, receipt: 1 });
  });

  it('leaves the recovery point where it was when a step fails: the failed step runs again on the retry', async () => {
    const operation = { name: 'charge', key: randomUUID() };
    let attempts = 0;
    const calls: string[] = [];
    const flow = async (run: IdempotencyRun) => {
      attempts += 1;
      await run.step('first', async () => calls.push(`first@${attempts}`));
      await run.step('second', async () => {
        calls.push(`second@${attempts}`);
        if (attempts === 1) throw new Interrupted('the provider timed out');
        return 'done';
      });
      return run.step('third', async () => calls.push(`third@${attempts}`));
    };
    await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(Interrupted);
    await expect(idempotency.execute(operation, flow)).resolves.toEqual({ result: 4, replayed: false }); // the length after the fourth call
    expect(calls).toEqual(['first@1', 'second@1', 'second@2', 'third@2']);
  });

  it('gives each step a key of its own, the same in every attempt', async () => {
    const operation = { name: 'charge', key: randomUUID() };
    const keys: string[] = [];
    let fail = true;
    const flow = async (run: IdempotencyRun) => {
      await run.step('a', async (step) => keys.push(step.key));
      await run.step('b', async (step) => {
        keys.push(step.key);
        if (fail) throw new Interrupted('first attempt');
      });
    };
    await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(Interrupted);
    fail = false;
    await idempotency.execute(operation, flow);
    const [a, b1, b2] = keys;
    expect(keys).toHaveLength(3); // step a skipped the second time
    expect(b2).toBe(b1);
    expect(a).not.toBe(b1);
    const other = { name: 'charge', key: randomUUID() };
    await idempotency.execute(other, (run) => run.step('a', async (step) => expect(step.key).not.toBe(a)));
  });

  it("keeps only the names of a completed operation's steps, not their results (no attempt reads them any more)", async () => {
    const operation = { name: 'secrets', key: randomUUID() };
    await idempotency.execute(operation, async (run) => {
      await run.step('card', async () => ({ pan: 'secret-4242' }));
      await run.step('receipt', async () => 'secret-receipt');
    });
    const stored = await storedStepsOf(operation.key);
    expect(JSON.stringify(stored)).not.toContain('secret');
    expect(JSON.stringify(stored)).toContain('card');
    expect(JSON.stringify(stored)).toContain('receipt');
  });

  /** The steps as the store holds them for `key`: the column on PostgreSQL, the record's field on Redis. */
  async function storedStepsOf(key: string): Promise<unknown> {
    const redis = app.redis;
    if (!redis) {
      const [row] = await db.query<{ steps: unknown }>(
        'SELECT steps FROM idempotency_records WHERE idempotency_key = $1',
        [key],
      );
      return row.steps;
    }
    const keys = await redis.client.keys(`${redis.keyPrefix}{*}`);
    for (const recordKey of keys) {
      if ((await redis.client.hget(recordKey, 'k')) === key)
        return JSON.parse((await redis.client.hget(recordKey, 'p')) ?? 'null');
    }
    throw new Error(`no record of ${key}`);
  }

  describe('refuses the pitfalls of journaled steps, running nothing of the refused step', () => {
    it('one name twice in one attempt (a loop)', async () => {
      let ran = 0;
      const flow = async (run: IdempotencyRun) => {
        for (const _item of [1, 2]) await run.step('send', async () => (ran += 1));
      };
      await expect(idempotency.execute({ name: 'loop', key: randomUUID() }, flow)).rejects.toMatchObject(
        stepFault('name_reused'),
      );
      expect(ran).toBe(1);
    });

    it('steps in parallel, or one inside another', async () => {
      const ran: string[] = [];
      const parallel = (run: IdempotencyRun) =>
        Promise.all(['a', 'b'].map((name) => run.step(name, async () => ran.push(name))));
      await expect(idempotency.execute({ name: 'parallel', key: randomUUID() }, parallel)).rejects.toMatchObject(
        stepFault('overlapping'),
      );
      const nested = (run: IdempotencyRun) =>
        run.step('outer', async () => run.step('inner', async () => ran.push('inner')));
      await expect(idempotency.execute({ name: 'nested', key: randomUUID() }, nested)).rejects.toMatchObject(
        stepFault('overlapping'),
      );
      expect(ran).not.toContain('b');
      expect(ran).not.toContain('inner');
    });

    it('a step outside an operation', async () => {
      const context = app.context.get(IdempotencyContext);
      let ran = false;
      await expect(context.step('loose', async () => (ran = true))).rejects.toMatchObject(stepFault('outside_run'));
      expect(ran).toBe(false);
    });

    it('a step list that no longer matches the recovery point (code changed between attempts), keeping it', async () => {
      const operation = { name: 'deploy', key: randomUUID() };
      const ran: string[] = [];
      const before = async (run: IdempotencyRun) => {
        await run.step('reserve', async () => ran.push('reserve'));
        throw new Interrupted('the old build crashed');
      };
      const after = async (run: IdempotencyRun) => {
        await run.step('validate', async () => ran.push('validate'));
        await run.step('reserve', async () => ran.push('reserve again'));
      };
      await expect(idempotency.execute(operation, before)).rejects.toBeInstanceOf(Interrupted);
      const refused = idempotency.execute(operation, after);
      await expect(refused).rejects.toMatchObject(stepFault('steps_changed'));
      await expect(refused).rejects.toThrow('"validate" now, and an earlier attempt recorded "reserve" there');
      expect(ran).toEqual(['reserve']);
      // The recovery point is still there for code that matches it.
      await expect(
        idempotency.execute(operation, (run) => run.step('reserve', async () => ran.push('never'))),
      ).resolves.toEqual({ result: 1, replayed: false });
    });

    it('a name that is no name', async () => {
      const flow = (run: IdempotencyRun) => run.step('', async () => 1);
      await expect(idempotency.execute({ name: 'unnamed', key: randomUUID() }, flow)).rejects.toMatchObject(
        stepFault('invalid_name'),
      );
    });
  });

  describe('refuses what it cannot keep', () => {
    it('a step begun after its attempt ended (left running, or started from a callback), running nothing', async () => {
      let kept: IdempotencyRun | undefined;
      await idempotency.execute({ name: 'ended', key: randomUUID() }, async (run) => {
        kept = run;
      });
      let ran = false;
      await expect(kept?.step('late', async () => (ran = true))).rejects.toMatchObject(stepFault('run_ended'));
      expect(ran).toBe(false);
    });

    it('a result JSON cannot hold (a BigInt), naming it, and keeps what JSON has no value for as null', async () => {
      const operation = { name: 'values', key: randomUUID() };
      await expect(idempotency.execute(operation, (run) => run.step('bigint', async () => 10n))).rejects.toMatchObject(
        stepFault('unserializable'),
      );
      const again = await idempotency.execute(operation, async (run) => {
        const nothing = await run.step('function', async () => () => 1);
        return { nothing };
      });
      expect(again).toEqual({ result: { nothing: null }, replayed: false });
    });

    it('results larger together than an operation keeps (1 MiB of JSON), counting those recorded by earlier attempts', async () => {
      const operation = { name: 'large', key: randomUUID() };
      const half = 'x'.repeat(600 * 1024);
      let failFirst = true;
      const flow = async (run: IdempotencyRun) => {
        await run.step('first', async () => half);
        if (failFirst) throw new Interrupted('after the first');
        await run.step('second', async () => half);
      };
      await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(Interrupted);
      failFirst = false;
      await expect(idempotency.execute(operation, flow)).rejects.toMatchObject(stepFault('result_too_large'));
    });

    it('a name the stores would not keep as it is (a NUL, a lone surrogate)', async () => {
      for (const name of ['a\0b', 'send-\uD800']) {
        let ran = false;
        const flow = (run: IdempotencyRun) => run.step(name, async () => (ran = true));
        await expect(idempotency.execute({ name: 'names', key: randomUUID() }, flow)).rejects.toMatchObject(
          stepFault('invalid_name'),
        );
        expect(ran).toBe(false);
      }
    });

    it('more than 100 steps in one operation, before the 101st runs', async () => {
      let ran = 0;
      const flow = async (run: IdempotencyRun) => {
        for (let item = 0; item <= 100; item += 1) await run.step(`item:${item}`, async () => (ran += 1));
      };
      await expect(idempotency.execute({ name: 'many', key: randomUUID() }, flow)).rejects.toMatchObject(
        stepFault('too_many_steps'),
      );
      expect(ran).toBe(100);
    });
  });

  it('records nothing for an attempt fenced off while its step ran: the attempt holding the key runs it', async () => {
    const operation = { name: 'fenced', key: randomUUID() };
    const ran: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const slow = idempotency.execute(
      operation,
      (run) =>
        run.step('slow', async () => {
          ran.push('slow@first');
          await held;
          return 'first';
        }),
      { leaseSeconds: 0.3 },
    );
    // The first attempt's lease lapses (no renewal comes: its renewals are a third of a 0.3 s lease, which the
    // takeover below beats by taking the key once it is free).
    // Taken over once the first attempt's step runs (its claim made), never before its claim.
    await waitFor(async () => (ran.includes('slow@first') ? true : undefined), 'the first step');
    const taken = await takeOver(operation, (run) => run.step('slow', async () => (ran.push('slow@taker'), 'taker')));
    release();
    await expect(slow).rejects.toMatchObject(stepFault('claim_lost'));
    expect(taken).toEqual({ result: 'taker', replayed: false });
    expect(ran).toEqual(['slow@first', 'slow@taker']);
  });

  /** Takes the operation over once the attempt holding it stops renewing its lease: retried while it is in progress. */
  async function takeOver<T>(
    operation: { name: string; key: string },
    work: (run: IdempotencyRun) => Promise<T>,
  ): Promise<Awaited<ReturnType<typeof idempotency.execute<T>>>> {
    stopRenewals(operation.key);
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        return await idempotency.execute(operation, work);
      } catch (error) {
        if ((error as { code?: string }).code !== 'request_in_progress' || Date.now() > deadline) throw error;
        await delay(50);
      }
    }
  }

  /**
   * Makes renewals of `key` extend nothing (answered as done), as a holder that stalls stops extending its lease: the
   * lease lapses while its step runs.
   */
  function stopRenewals(key: string): void {
    const { store } = idempotency as unknown as { store: IdempotencyStore };
    const renew = store.renew.bind(store);
    store.renew = async (claim, timing) => (claim.scope.key === key ? true : renew(claim, timing));
  }

  if (store === 'redis') {
    it('refuses a transactional step on Redis, running nothing of it', async () => {
      let ran = false;
      const flow = (run: IdempotencyRun) => run.step('rows', async () => (ran = true), { transactional: true });
      const refused = idempotency.execute({ name: 'rows', key: randomUUID() }, flow);
      await expect(refused).rejects.toMatchObject(stepFault('unsupported'));
      await expect(refused).rejects.toThrow('runs no transaction');
      expect(ran).toBe(false);
    });
  }

  if (store === 'postgres') {
    describe('a transactional step: its writes and its recovery point commit together, or neither', () => {
      async function entriesOf(key: string): Promise<number> {
        const [{ n }] = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM ledger_entries WHERE key = $1', [
          key,
        ]);
        return n;
      }

      it('commits the rows with the step: a retry skips it and the rows are there once', async () => {
        const operation = { name: 'rows', key: randomUUID() };
        const context = app.context.get(PostgresIdempotencyContext);
        let fail = true;
        const flow = async (run: IdempotencyRun) => {
          const row = await run.step(
            'write-row',
            async () => {
              const entries = context.getRepository(LedgerEntry);
              return (await entries.save(entries.create({ key: operation.key }))).id;
            },
            { transactional: true },
          );
          if (fail) throw new Interrupted('after the row');
          return row;
        };
        await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(Interrupted);
        expect(await entriesOf(operation.key)).toBe(1);
        fail = false;
        const { result } = await idempotency.execute(operation, flow);
        expect(typeof result).toBe('number');
        expect(await entriesOf(operation.key)).toBe(1);
      });

      it('rolls the rows back with a step that fails after writing them: a retry writes them once', async () => {
        const operation = { name: 'rows', key: randomUUID() };
        const context = app.context.get(PostgresIdempotencyContext);
        let fail = true;
        const flow = (run: IdempotencyRun) =>
          run.step(
            'write-row',
            async () => {
              await context.getRepository(LedgerEntry).insert({ key: operation.key });
              if (fail) throw new Interrupted('after writing, before the step ended');
              return 'written';
            },
            { transactional: true },
          );
        await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(Interrupted);
        expect(await entriesOf(operation.key)).toBe(0);
        fail = false;
        await expect(idempotency.execute(operation, flow)).resolves.toEqual({ result: 'written', replayed: false });
        expect(await entriesOf(operation.key)).toBe(1);
      });

      it("answers a step whose commit fails (a deferred constraint) as the store's fault, its rows and recovery point gone", async () => {
        await db.query(
          `CREATE TABLE IF NOT EXISTS deferred_rows (key text,
             CONSTRAINT deferred_rows_once UNIQUE (key) DEFERRABLE INITIALLY DEFERRED)`,
        );
        const operation = { name: 'deferred', key: randomUUID() };
        const context = app.context.get(PostgresIdempotencyContext);
        let runs = 0;
        const flow = (run: IdempotencyRun) =>
          run.step(
            'write-twice',
            async () => {
              runs += 1;
              await context.manager?.query('INSERT INTO deferred_rows (key) VALUES ($1), ($1)', [operation.key]);
            },
            { transactional: true },
          );
        await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
        const [{ n }] = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM deferred_rows WHERE key = $1', [
          operation.key,
        ]);
        expect(n).toBe(0);
        // Not recorded: the retry runs the step again (and fails the same way).
        await expect(idempotency.execute(operation, flow)).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
        expect(runs).toBe(2);
      });

      /**
       * A transactional step that writes a ledger row of `key`, then waits for `finish()` before it ends: `written`
       * once the row is written (its operation claimed).
       */
      function rowStepHeldOpen(key: string) {
        const context = app.context.get(PostgresIdempotencyContext);
        let finish!: () => void;
        const held = new Promise<void>((resolve) => (finish = resolve));
        let wrote!: () => void;
        const written = new Promise<void>((resolve) => (wrote = resolve));
        const flow = (run: IdempotencyRun) =>
          run.step(
            'write-row',
            async () => {
              await context.getRepository(LedgerEntry).insert({ key });
              wrote();
              await held;
            },
            { transactional: true },
          );
        return { flow, written, finish };
      }

      it('answers a transactional step whose recovery point is not recorded in time 503, its rows rolled back', async () => {
        const operation = { name: 'locked', key: randomUUID() };
        const step = rowStepHeldOpen(operation.key);
        const running = idempotency.execute(operation, step.flow);
        await step.written;
        const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [
          operation.key,
        ]);
        try {
          step.finish();
          await expect(running).rejects.toBeInstanceOf(IdempotencyStoreUnavailableError);
        } finally {
          await lock.letGo();
        }
        expect(await entriesOf(operation.key)).toBe(0);
      });

      it('rolls back the rows of a fenced attempt with its step', async () => {
        const operation = { name: 'rows', key: randomUUID() };
        const step = rowStepHeldOpen(operation.key);
        const slow = idempotency.execute(operation, step.flow, { leaseSeconds: 0.3 });
        // Taken over once the first attempt's step has written (its claim made), never before its claim.
        await step.written;
        const taken = await takeOver(operation, async () => 'taker, writing nothing');
        step.finish();
        await expect(slow).rejects.toMatchObject(stepFault('claim_lost'));
        expect(taken.result).toBe('taker, writing nothing');
        expect(await entriesOf(operation.key)).toBe(0);
      });

      it("records no step of a transactional operation: its record's row stays free for the lease's renewals", async () => {
        const operation = { name: 'whole', key: randomUUID() };
        await idempotency.execute(
          operation,
          async (run) => {
            await run.step('one', async () => 1);
            // Another connection locks the record's row at once: no statement of the operation holds it.
            const [row] = await db.query<{ steps: unknown }>(
              'SELECT steps FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE NOWAIT',
              [operation.key],
            );
            expect(row.steps).toBeNull();
          },
          { transactional: true },
        );
      });

      it('runs every step of a transactional operation again after it rolled back', async () => {
        const operation = { name: 'whole', key: randomUUID() };
        const ran: string[] = [];
        let fail = true;
        const flow = async (run: IdempotencyRun) => {
          await run.step('one', async () => ran.push('one'));
          if (fail) throw new Interrupted('rolled back');
          return 'ok';
        };
        await expect(idempotency.execute(operation, flow, { transactional: true })).rejects.toBeInstanceOf(Interrupted);
        fail = false;
        await idempotency.execute(operation, flow, { transactional: true });
        expect(ran).toEqual(['one', 'one']);
      });
    });
  }
});

/** Gates the next step of `StepsController` until the test opens it. */
let stepGate: Promise<void> = Promise.resolve();
let stepRuns = 0;

@Controller('stepped')
class StepsController {
  constructor(
    private readonly idempotency: IdempotencyContext,
    private readonly operations: IdempotencyService,
  ) {}

  /** A nested operation whose key another input used: its refusal is this handler's error, not this call's answer. */
  @Post('nested')
  @Idempotent()
  async nested(@Headers('x-inner-key') innerKey: string) {
    await this.operations.execute({ name: 'inner', key: innerKey, input: 'another input' }, async () => 1);
    return { ran: true };
  }

  @Post()
  @Idempotent()
  async create(@Headers('idempotency-key') key: string) {
    const written = await this.idempotency.step('write', async () => {
      stepRuns += 1;
      await stepGate;
      return { key };
    });
    return { written };
  }
}

describe('a step of an HTTP route whose recovery point the database does not record in time', () => {
  it('is answered 503 idempotency_store_unavailable with Retry-After, and the retry gets the final answer', async () => {
    const app = await startTestApp({
      database: db,
      controllers: [StepsController],
      idempotency: { singleTenant: true, storeTimeoutSeconds: 1, retryAfterSeconds: 2 },
    });
    try {
      const key = randomUUID();
      let open!: () => void;
      stepGate = new Promise<void>((resolve) => (open = resolve));
      const first = request(app.url)
        .post('/stepped')
        .set('Idempotency-Key', key)
        .send({})
        .then((response) => response);
      // The record is claimed and the step runs: its row is locked away before the step records its result.
      await waitFor(async () => (stepRuns > 0 ? true : undefined), 'the step to run');
      const lock = await holdLock(db.url, 'SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [
        key,
      ]);
      try {
        open();
        const refused = await first;
        expect(refused.status).toBe(503);
        expect(refused.headers['retry-after']).toBe('2');
        expect(refused.body).toMatchObject({ statusCode: 503, error: 'idempotency_store_unavailable' });
      } finally {
        await lock.letGo();
      }
      const retry = await waitFor(async () => {
        const response = await request(app.url).post('/stepped').set('Idempotency-Key', key).send({});
        return response.status === 409 ? undefined : response;
      }, 'the released key');
      expect(retry.status).toBe(201);
      expect(retry.body).toEqual({ written: { key } });
    } finally {
      stepGate = Promise.resolve();
      await app.close();
    }
  });
});

describe('a refusal met inside a route that is not its own (a nested execute() refused)', () => {
  it("is the handler's error (500), never stored as the route's answer: a retry runs it again", async () => {
    const app = await startTestApp({
      database: db,
      controllers: [StepsController],
      idempotency: { singleTenant: true },
    });
    try {
      const innerKey = randomUUID();
      await app.app
        .get(IdempotencyService)
        .execute({ name: 'inner', key: innerKey, input: 'first input' }, async () => 0);
      const key = randomUUID();
      const send = () =>
        request(app.url).post('/stepped/nested').set('Idempotency-Key', key).set('X-Inner-Key', innerKey).send({});
      const first = await send();
      expect(first.status).toBe(500);
      const retry = await send();
      expect(retry.status).toBe(500);
      expect(retry.headers['idempotent-replay']).toBeUndefined();
    } finally {
      await app.close();
    }
  });
});
