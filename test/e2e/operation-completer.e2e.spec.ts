import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Controller, HttpException, Post, ServiceUnavailableException } from '@nestjs/common';
import request from 'supertest';
import {
  type AbandonedOperation,
  type CompletedOutcome,
  IdempotencyCompleter,
  IdempotencyContext,
  type IdempotencyRun,
  IdempotencyService,
  IdempotencySetupError,
  Idempotent,
  InMemoryIdempotencyStore,
} from '../../src/index.js';
import { routeCompletion } from '../../src/http/index.js';
import { IDEMPOTENCY_CHANNELS, type CompletionEvent } from '../../src/observability/index.js';
import { IdempotencyOperator, PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { operationFingerprint } from '../../src/protocol/idempotent-operations.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import type { IdempotencyStore } from '../../src/store/index.js';
import { describeOnStores } from '../support/on-each-store.js';
import { startTestApp, startTestContext, type TestApp, type TestContext } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * The completer, on PostgreSQL and in memory: an operation registered with it whose attempt was abandoned (failed
 * after a step, or its process gone with its lease) is claimed again once its backoff has passed and finished from its
 * last step, without a retry; never one an attempt holds; given up after `maxAttempts`, left for an operator; each
 * tenant's with its own account.
 */

const db = useTestDatabase();

/** An error a test throws on purpose: the attempt fails there, as a crash would leave it. */
class Interrupted extends Error {}

const BACKOFF_SECONDS = 60;
const MAX_ATTEMPTS = 3;
const NOTHING = { completed: 0, failed: 0, gaveUp: 0, skipped: 0 };

type CompleterStore = 'postgres' | 'memory';

/** Where a test's records are, and how it makes time pass for one of them (the end of its lease, moved back). */
interface Place {
  options: { database: { url: string } } | { database: 'memory'; store: InMemoryIdempotencyStore };
  age(key: string, seconds: number): Promise<void>;
}

function placeOn(store: CompleterStore): Place {
  if (store === 'postgres') {
    return {
      options: { database: db },
      age: async (key, seconds) => {
        await db.query(
          `UPDATE idempotency_records SET locked_until = locked_until - make_interval(secs => $2)
           WHERE idempotency_key = $1`,
          [key, seconds],
        );
      },
    };
  }
  // The in-memory store's clock moves for every record: each test has a store of its own.
  let offsetMs = 0;
  const memory = new InMemoryIdempotencyStore({ now: () => Date.now() + offsetMs });
  return {
    options: { database: 'memory', store: memory },
    age: async (_key, seconds) => {
      offsetMs += seconds * 1000;
    },
  };
}

let names = 0;
/** An operation name of the test's own: the completer of one test never sees another's records. */
const newName = () => `payout-${process.pid}-${(names += 1)}`;

/** Two steps; the first attempt fails between them, as a crash after the first would leave it. */
function twoSteps() {
  const runs = { reserve: 0, pay: 0 };
  let failBetween = true;
  return {
    runs,
    stopFailing: () => (failBetween = false),
    work: async (run: IdempotencyRun) => {
      const reserved = await run.step('reserve', async () => ({ reservation: ++runs.reserve }));
      if (failBetween) throw new Interrupted('the process went away after reserving');
      const paid = await run.step('pay', async () => `paid ${++runs.pay}`);
      return { reserved, paid, account: run.scope.account };
    },
  };
}

for (const storeName of ['postgres', 'memory'] as const) {
  describe(`The completer on ${storeName}`, () => {
    let place: Place;
    let app: TestContext;
    let idempotency: IdempotencyService;
    let completer: IdempotencyCompleter;

    beforeEach(async () => {
      place = placeOn(storeName);
      app = await startTestContext({
        ...place.options,
        idempotency: {
          singleTenant: true,
          leaseSeconds: 30,
          completer: { intervalSeconds: false, backoffSeconds: BACKOFF_SECONDS, maxAttempts: MAX_ATTEMPTS },
        },
      });
      idempotency = app.context.get(IdempotencyService);
      completer = app.context.get(IdempotencyCompleter);
    });
    afterEach(() => app?.close());

    /** What the completer warned of (the in-memory store warns of itself at start). */
    const completerWarnings = () => app.logger.warnings.filter((line) => line.includes('[IdempotencyCompleter]'));

    it('finishes an operation abandoned after a step, from that step, once its backoff has passed; a retry then replays it', async () => {
      const operation = { name: newName(), key: randomUUID(), input: { amount: 100 } };
      const { runs, stopFailing, work } = twoSteps();
      await expect(idempotency.execute(operation, work)).rejects.toBeInstanceOf(Interrupted);

      const seen: Array<Omit<AbandonedOperation, 'run'>> = [];
      completer.registerOperation(operation.name, async ({ run, ...abandoned }) => {
        seen.push(abandoned);
        stopFailing();
        return work(run);
      });
      // Its lease ended at its release: within the backoff (60 s for a first attempt), it is the client's to retry.
      await place.age(operation.key, BACKOFF_SECONDS - 10);
      await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
      expect(seen).toEqual([]);

      await place.age(operation.key, 11);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 1 });
      expect(seen).toEqual([
        {
          scope: { account: '', endpoint: `operation ${operation.name}`, key: operation.key },
          steps: ['reserve'],
          attempt: 2,
        },
      ]);
      expect(runs).toEqual({ reserve: 1, pay: 1 });

      const result = { reserved: { reservation: 1 }, paid: 'paid 1', account: '' };
      await expect(
        idempotency.execute(operation, () => Promise.reject(new Error('a completed operation never runs again'))),
      ).resolves.toEqual({ result, replayed: true });
      // Completed: never found again.
      await place.age(operation.key, 10_000);
      await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
    });

    it('never claims an operation whose attempt still holds it, however long it has run', async () => {
      const operation = { name: newName(), key: randomUUID() };
      let completions = 0;
      completer.registerOperation(operation.name, async () => (completions += 1));
      let finish!: () => void;
      const finished = new Promise<void>((resolve) => (finish = resolve));
      let stepped!: () => void;
      const inStep = new Promise<void>((resolve) => (stepped = resolve));
      const running = idempotency.execute(operation, async (run) => {
        await run.step('reserve', async () => 'reserved');
        stepped();
        await finished;
        return 'done by its own attempt';
      });
      await inStep;
      await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
      finish();
      await expect(running).resolves.toEqual({ result: 'done by its own attempt', replayed: false });
      expect(completions).toBe(0);
    });

    it(`gives up after ${MAX_ATTEMPTS} attempts, leaving the operation in progress with its steps; a retry may still finish it`, async () => {
      const operation = { name: newName(), key: randomUUID() };
      const { stopFailing, work } = twoSteps();
      await expect(idempotency.execute(operation, work)).rejects.toBeInstanceOf(Interrupted);
      const attempts: number[] = [];
      completer.registerOperation(operation.name, async ({ attempt }) => {
        attempts.push(attempt);
        throw new Interrupted(`the payout service is down (attempt ${attempt})`);
      });

      await place.age(operation.key, BACKOFF_SECONDS);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, failed: 1 });
      await expect(completer.gaveUp()).resolves.toEqual([]);
      // The backoff doubles: 120 s after the second attempt.
      await place.age(operation.key, 2 * BACKOFF_SECONDS - 10);
      await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
      await place.age(operation.key, 10);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, gaveUp: 1 });
      await place.age(operation.key, 10_000); // well within its TTL (24 h)
      await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
      expect(attempts).toEqual([2, 3]);
      expect(completerWarnings()).toEqual([
        expect.stringContaining('it is left for a later attempt, from its last step'),
        expect.stringContaining(`the completer gives up on it after ${MAX_ATTEMPTS} attempts`),
      ]);

      // What an operator's view lists: the operations the completer gave up on.
      await expect(completer.gaveUp()).resolves.toEqual([
        {
          scope: { account: '', endpoint: `operation ${operation.name}`, key: operation.key },
          fingerprint: expect.any(String),
          attempts: MAX_ATTEMPTS,
          steps: ['reserve'],
        },
      ]);
      if (storeName === 'postgres') {
        const operator = new IdempotencyOperator(async (text, values) => db.query(text, values));
        const [stuck] = (await operator.stuck({ limit: 1000 })).filter((record) => record.key === operation.key);
        expect(stuck).toMatchObject({ status: 'in_progress', attempts: MAX_ATTEMPTS, steps: ['reserve'] });
        // However many attempts a client's retries add, its backoff does not overflow.
        await db.query('UPDATE idempotency_records SET attempts = 2000 WHERE idempotency_key = $1', [operation.key]);
        await expect(completer.gaveUp()).resolves.toEqual([expect.objectContaining({ attempts: 2000 })]);
        await expect(completer.completeAbandoned()).resolves.toEqual(NOTHING);
      }
      // Its client's retry takes it over and resumes from its step.
      stopFailing();
      await expect(idempotency.execute(operation, work)).resolves.toMatchObject({
        result: { reserved: { reservation: 1 }, paid: 'paid 1' },
        replayed: false,
      });
      await expect(completer.gaveUp()).resolves.toEqual([]);
    });

    it('finishes a crashed operation that recorded no step from the intent its completion finds, or releases it when it finds none', async () => {
      const store = app.context.get<IdempotencyStore>(IDEMPOTENCY_STORE);
      const name = newName();
      const intents = new Map([['kept', { amount: 5 }]]);
      completer.registerOperation(name, async ({ scope }) => {
        const intent = intents.get(scope.key.split(':')[0]);
        if (!intent) throw new Interrupted('no intent was kept for this key');
        return { paid: intent.amount };
      });
      const crashed = async (key: string, input: object) => {
        // The claim of an attempt whose process died at once: nothing recorded, its lease left to lapse.
        const scope = { account: '', endpoint: `operation ${name}`, key };
        const claim = await store.claim(scope, operationFingerprint(input), randomUUID(), {
          leaseSeconds: 1,
          ttlSeconds: 3600,
        });
        expect(claim).toMatchObject({ claimed: true });
        await place.age(key, BACKOFF_SECONDS + 1);
      };
      const kept = `kept:${randomUUID()}`;
      const lost = `lost:${randomUUID()}`;
      await crashed(kept, { amount: 5 });
      await crashed(lost, { amount: 7 });

      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 1, failed: 1 });
      expect(completerWarnings()).toEqual([
        expect.stringContaining('it had recorded no step, so its record is released'),
      ]);
      await expect(
        idempotency.execute({ name, key: kept, input: { amount: 5 } }, async () => 'never run'),
      ).resolves.toEqual({ result: { paid: 5 }, replayed: true });
      // Released: the next call of its key runs it anew.
      await expect(
        idempotency.execute({ name, key: lost, input: { amount: 7 } }, async () => 'run anew'),
      ).resolves.toEqual({ result: 'run anew', replayed: false });
    });

    it("completes each tenant's operation under its own account, never another's", async () => {
      const name = newName();
      const key = randomUUID();
      const flows = { acct_a: twoSteps(), acct_b: twoSteps() };
      for (const [account, flow] of Object.entries(flows)) {
        await expect(idempotency.execute({ name, key, account }, flow.work)).rejects.toBeInstanceOf(Interrupted);
      }
      completer.registerOperation(name, async ({ run, scope }) => {
        const flow = flows[scope.account as keyof typeof flows];
        flow.stopFailing();
        return flow.work(run);
      });
      await place.age(key, BACKOFF_SECONDS + 1);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 2 });
      for (const account of Object.keys(flows)) {
        await expect(idempotency.execute({ name, key, account }, async () => 'never run')).resolves.toMatchObject({
          result: { account },
          replayed: true,
        });
      }
    });

    it('leaves at its new step an operation whose completion recorded a step and then failed', async () => {
      const store = app.context.get<IdempotencyStore>(IDEMPOTENCY_STORE);
      const operation = { name: newName(), key: randomUUID() };
      const scope = { account: '', endpoint: `operation ${operation.name}`, key: operation.key };
      await store.claim(scope, operationFingerprint(undefined), randomUUID(), { leaseSeconds: 1, ttlSeconds: 3600 });
      const { stopFailing, work } = twoSteps();
      completer.registerOperation(operation.name, async ({ run }) => work(run));
      await place.age(operation.key, BACKOFF_SECONDS + 1);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, failed: 1 });
      expect(completerWarnings()).toEqual([
        expect.stringContaining('it is left for a later attempt, from its last step'),
      ]);
      stopFailing();
      await place.age(operation.key, 2 * BACKOFF_SECONDS + 1);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 1 });
      await expect(idempotency.execute(operation, async () => 'never run')).resolves.toMatchObject({
        result: { reserved: { reservation: 1 }, paid: 'paid 1' },
        replayed: true,
      });
    });

    it('fails a completion whose outcome cannot be stored (a status out of range, a function), never storing it', async () => {
      const operation = { name: newName(), key: randomUUID() };
      const { stopFailing, work } = twoSteps();
      await expect(idempotency.execute(operation, work)).rejects.toBeInstanceOf(Interrupted);
      stopFailing();
      const outcomes: CompletedOutcome[] = [{ status: 1000, body: 'too high' }, { body: () => 'no JSON' }];
      completer.register(`operation ${operation.name}`, async ({ run }) => {
        await work(run);
        return outcomes.shift() as CompletedOutcome;
      });
      await place.age(operation.key, BACKOFF_SECONDS + 1);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, failed: 1 });
      await place.age(operation.key, 2 * BACKOFF_SECONDS + 1);
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, gaveUp: 1 });
      expect(completerWarnings()).toEqual([
        expect.stringContaining("A completion's status must be an integer from 100 to 599, got the number 1000"),
        expect.stringContaining("An operation's result must be JSON, and a function has none"),
      ]);
      // Nothing was stored: the client's retry finishes it from its steps.
      await expect(idempotency.execute(operation, work)).resolves.toMatchObject({ replayed: false });
    });

    it('refuses a second completion of one endpoint at start-up', () => {
      const name = newName();
      completer.registerOperation(name, async () => 1);
      expect(() => completer.registerOperation(name, async () => 2)).toThrow(IdempotencySetupError);
    });
  });
}

describe('The completer and a record that changed between its look and its claim', () => {
  let app: TestContext | undefined;
  afterEach(() => app?.close());

  it.each([
    ['released by an operator', 'DELETE FROM idempotency_records WHERE idempotency_key = $1'],
    ['expired', 'UPDATE idempotency_records SET expires_at = now() WHERE idempotency_key = $1'],
  ])('never runs an operation %s meanwhile (its steps would run again), and leaves no record', async (_, change) => {
    /** The store, its record changed the moment the completer has found it. */
    class ChangedMeanwhile extends PostgresIdempotencyStore {
      override async findAbandoned(query: Parameters<PostgresIdempotencyStore['findAbandoned']>[0]) {
        const found = await super.findAbandoned(query);
        for (const { scope } of found) await db.query(change, [scope.key]);
        return found;
      }
    }
    app = await startTestContext({
      database: db,
      overrideStore: (dataSource) => new ChangedMeanwhile(dataSource, 'idempotency_records'),
      idempotency: { singleTenant: true, completer: { intervalSeconds: false, backoffSeconds: 1 } },
    });
    const operation = { name: newName(), key: randomUUID() };
    const { runs, stopFailing, work } = twoSteps();
    await expect(app.context.get(IdempotencyService).execute(operation, work)).rejects.toBeInstanceOf(Interrupted);
    let completions = 0;
    app.context.get(IdempotencyCompleter).registerOperation(operation.name, async ({ run }) => {
      completions += 1;
      stopFailing();
      return work(run);
    });
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 minute' WHERE idempotency_key = $1`,
      [operation.key],
    );
    await expect(app.context.get(IdempotencyCompleter).completeAbandoned()).resolves.toEqual({
      ...NOTHING,
      skipped: 1,
    });
    expect(completions).toBe(0);
    expect(runs).toEqual({ reserve: 1, pay: 0 });
    await expect(
      db.query('SELECT count(*)::int AS n FROM idempotency_records WHERE idempotency_key = $1', [operation.key]),
    ).resolves.toEqual([{ n: 0 }]);
  });

  it('stops waiting for a completion past maxHoldSeconds, and goes on with the next operation', async () => {
    app = await startTestContext({
      database: db,
      idempotency: {
        singleTenant: true,
        shutdownTimeoutSeconds: 1,
        completer: { intervalSeconds: false, backoffSeconds: 1 },
      },
    });
    const idempotency = app.context.get(IdempotencyService);
    const name = newName();
    const hung = { name, key: `hung:${randomUUID()}` };
    const next = { name, key: `next:${randomUUID()}` };
    for (const operation of [hung, next]) {
      await expect(idempotency.execute(operation, twoSteps().work)).rejects.toBeInstanceOf(Interrupted);
      await db.query(
        `UPDATE idempotency_records SET locked_until = now() - interval '1 minute' WHERE idempotency_key = $1`,
        [operation.key],
      );
    }
    // The hung one idle longer: found first.
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 hour' WHERE idempotency_key = $1`,
      [hung.key],
    );
    app.context
      .get(IdempotencyCompleter)
      .registerOperation(
        name,
        ({ scope }) => (scope.key === hung.key ? new Promise(() => undefined) : Promise.resolve('done')),
        { maxHoldSeconds: 0.5 },
      );
    await expect(app.context.get(IdempotencyCompleter).completeAbandoned()).resolves.toEqual({
      ...NOTHING,
      failed: 1,
      completed: 1,
    });
    expect(app.logger.warnings).toEqual(
      expect.arrayContaining([expect.stringContaining('it did not end within maxHoldSeconds (0.5 s)')]),
    );
    await expect(idempotency.execute(next, async () => 'never run')).resolves.toEqual({
      result: 'done',
      replayed: true,
    });
  });
});

describe('The completer and its completions past their bounds', () => {
  let app: TestContext | undefined;
  afterEach(() => app?.close());

  it('waits for a completion under a maxHoldSeconds longer than a Node.js timer keeps, and refuses a header a replay could not send', async () => {
    app = await startTestContext({
      database: 'memory',
      idempotency: { singleTenant: true, completer: { intervalSeconds: false, backoffSeconds: 1, maxAttempts: 10 } },
    });
    const idempotency = app.context.get(IdempotencyService);
    const operation = { name: newName(), key: randomUUID() };
    await expect(idempotency.execute(operation, twoSteps().work)).rejects.toBeInstanceOf(Interrupted);
    const outcomes: CompletedOutcome[] = [{ body: 1, headers: { 'x-note': 'one\r\nset-cookie: a=b' } }, { body: 2 }];
    app.context
      .get(IdempotencyCompleter)
      // Work that takes a while: a timer cut to 1 ms would end it first.
      .register(`operation ${operation.name}`, async () => (await delay(50), outcomes.shift() as CompletedOutcome), {
        maxHoldSeconds: 30 * 24 * 3600,
      });
    await waitFor(
      async () => ((await app?.context.get(IdempotencyCompleter).completeAbandoned())?.failed === 1 ? true : undefined),
      'the first completion',
    );
    expect(app.logger.warnings).toEqual(
      expect.arrayContaining([expect.stringContaining('must be a token with a string value of one line')]),
    );
    await waitFor(
      async () =>
        (await app?.context.get(IdempotencyCompleter).completeAbandoned())?.completed === 1 ? true : undefined,
      'the second completion',
    );
    await expect(idempotency.execute(operation, async () => 'never run')).resolves.toEqual({
      result: 2,
      replayed: true,
    });
  });
});

describe('The completer and an attempt that holds the operation first', () => {
  /** A store on which a client's retry claims each abandoned operation the moment the completer has found it. */
  class RetriedFirst extends InMemoryIdempotencyStore {
    awaited = 0;
    override async findAbandoned(query: Parameters<InMemoryIdempotencyStore['findAbandoned']>[0]) {
      const found = await super.findAbandoned(query);
      for (const { scope, fingerprint } of found) {
        await this.claim(scope, fingerprint, randomUUID(), { leaseSeconds: 60, ttlSeconds: 3600 });
      }
      return found;
    }
    override markAwaited(scope: Parameters<InMemoryIdempotencyStore['markAwaited']>[0]) {
      this.awaited += 1;
      return super.markAwaited(scope);
    }
  }

  it("skips it at once, never waiting for its outcome, whatever the module's inFlight", async () => {
    let offsetMs = 0;
    const store = new RetriedFirst({ now: () => Date.now() + offsetMs });
    const app = await startTestContext({
      database: 'memory',
      store,
      idempotency: {
        singleTenant: true,
        inFlight: 'wait',
        inFlightWaitSeconds: 600,
        completer: { intervalSeconds: false, backoffSeconds: 1 },
      },
    });
    try {
      const operation = { name: newName(), key: randomUUID() };
      await expect(app.context.get(IdempotencyService).execute(operation, twoSteps().work)).rejects.toBeInstanceOf(
        Interrupted,
      );
      const completer = app.context.get(IdempotencyCompleter);
      completer.registerOperation(operation.name, () => Promise.reject(new Error('the retry holds it')));
      offsetMs += 2_000;
      await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, skipped: 1 });
      expect(store.awaited).toBe(0);
    } finally {
      await app.close();
    }
  });
});

describe('The completer on its schedule', () => {
  let app: TestContext;
  afterEach(() => app?.close());

  it('finishes an abandoned operation every intervalSeconds without being called', async () => {
    app = await startTestContext({
      database: db,
      idempotency: { singleTenant: true, completer: { intervalSeconds: 0.1, backoffSeconds: 0.1 } },
    });
    const idempotency = app.context.get(IdempotencyService);
    const operation = { name: newName(), key: randomUUID() };
    const { stopFailing, work } = twoSteps();
    await expect(idempotency.execute(operation, work)).rejects.toBeInstanceOf(Interrupted);

    const events: CompletionEvent[] = [];
    const listener = (event: unknown) => events.push(event as CompletionEvent);
    subscribe(IDEMPOTENCY_CHANNELS.completion, listener);
    try {
      app.context.get(IdempotencyCompleter).registerOperation(operation.name, async ({ run }) => {
        stopFailing();
        return work(run);
      });
      await waitFor(
        async () => events.some((event) => event.scope.key === operation.key) || undefined,
        'the completer',
      );
      expect(events).toEqual([expect.objectContaining({ attempt: 2, outcome: 'completed' })]);
      await expect(idempotency.execute(operation, work)).resolves.toMatchObject({ replayed: true });
    } finally {
      unsubscribe(IDEMPOTENCY_CHANNELS.completion, listener);
    }
  });
});

@Controller()
@Idempotent()
class ChargesController {
  /** Fails after its first step until `available`, as a provider that is down would have it. */
  static available = false;
  static declined = false;

  constructor(private readonly context: IdempotencyContext) {}

  @Post('charges')
  async create() {
    const charge = await this.context.step('create-charge', async () => ({ id: `ch_${randomUUID()}` }));
    if (ChargesController.declined) throw new HttpException({ error: 'card_declined' }, 402);
    if (!ChargesController.available) throw new ServiceUnavailableException('the provider is down');
    return { ...charge, status: 'succeeded' };
  }
}

describe('The completer of an HTTP route', () => {
  let app: TestApp;
  beforeEach(async () => {
    ChargesController.available = false;
    ChargesController.declined = false;
    app = await startTestApp({
      database: db,
      controllers: [ChargesController],
      idempotency: { singleTenant: true, completer: { intervalSeconds: false, backoffSeconds: 1 } },
    });
    const charges = app.app.get(ChargesController);
    app.app.get(IdempotencyCompleter).register(
      'POST /charges',
      routeCompletion(201, () => charges.create()),
    );
  });
  afterEach(() => app?.close());

  async function abandonedCharge(): Promise<string> {
    const key = randomUUID();
    await request(app.url).post('/charges').set('Idempotency-Key', key).expect(503);
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 minute' WHERE idempotency_key = $1`,
      [key],
    );
    return key;
  }

  it("stores the route's answer with its status, which the client's retry gets", async () => {
    const key = await abandonedCharge();
    ChargesController.available = true;
    await expect(app.app.get(IdempotencyCompleter).completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 1 });
    const retry = await request(app.url).post('/charges').set('Idempotency-Key', key).expect(201);
    expect(retry.headers['idempotent-replay']).toBe('true');
    expect(retry.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(retry.body).toEqual({ id: expect.stringMatching(/^ch_/), status: 'succeeded' });
  });

  it('stores a final HttpException as Nest answers it, and leaves the request on one that is not final', async () => {
    const completer = app.app.get(IdempotencyCompleter);
    const key = await abandonedCharge();
    await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, failed: 1 });
    expect(app.logger.warnings).toEqual([expect.stringContaining('the provider is down')]);
    ChargesController.declined = true;
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 hour' WHERE idempotency_key = $1`,
      [key],
    );
    await expect(completer.completeAbandoned()).resolves.toEqual({ ...NOTHING, completed: 1 });
    const retry = await request(app.url).post('/charges').set('Idempotency-Key', key).expect(402);
    expect(retry.body).toEqual({ error: 'card_declined' });
  });
});

describeOnStores(
  'The completer on %s',
  () => {
    it('is refused at start-up, saying where the stores that run it are named', async () => {
      const app = await startTestContext({ redis: {}, idempotency: { singleTenant: true } });
      try {
        expect(() => app.context.get(IdempotencyCompleter).registerOperation('payout', async () => 1)).toThrow(
          /cannot find abandoned records \(it has no findAbandoned\)\. Use a store that can/,
        );
      } finally {
        await app.close();
      }
    });
  },
  ['redis'],
);
