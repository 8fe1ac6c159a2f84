import { randomBytes, randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Body, Controller, Header, Headers, Post } from '@nestjs/common';
import request from 'supertest';
import {
  IdempotencyService,
  Idempotent,
  InMemoryIdempotencyStore,
  type IdempotencyScope,
  type OutcomeEncryptionOptions,
  type StoredResponse,
} from '../../src/index.js';
import { IDEMPOTENCY_CHANNELS, type RecordUnreadableEvent } from '../../src/protocol/idempotency-events.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { startTestApp, startTestContext, type TestApp } from '../support/test-app.js';
import { recordCountOf, useTestDatabase } from '../support/test-database.js';
import { WORK_LOG, workRowsOf } from '../support/work-log.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';

// Issue 21, "Protect": outcomes stored encrypted on the real PostgreSQL store, replayed across a rotation of the key
// ring, refused (never replayed nor run again) when they cannot be decrypted; the redact hook's stored outcome.

const db = useTestDatabase(WORK_LOG);

/** What must never reach the table in clear: in the body, and in a stored header. */
const BODY_MARKER = 'PLAINTEXT-BODY-MARKER-4242';
const HEADER_MARKER = 'PLAINTEXT-HEADER-MARKER';

const keyA = { id: 'key-a', key: randomBytes(32) };
const keyB = { id: 'key-b', key: randomBytes(32).toString('base64') };

/** Every run of a handler, however many applications the test started. */
let runs = 0;

function redactCard(outcome: StoredResponse): StoredResponse {
  const body = JSON.parse(outcome.body.toString('utf8')) as Record<string, unknown>;
  return { ...outcome, body: Buffer.from(JSON.stringify({ ...body, card: '[redacted]' })) };
}

function throwingHook(): StoredResponse {
  throw new Error('the hook failed');
}

/** Values a hook may return that no store can hold or no transport replay, chosen by the key's prefix. */
const MALFORMED: Record<string, (outcome: StoredResponse) => unknown> = {
  'status-out-of-range': (outcome) => ({ ...outcome, status: 40000 }),
  'status-not-integer': (outcome) => ({ ...outcome, status: 201.5 }),
  'headers-null': (outcome) => ({ ...outcome, headers: null }),
  'header-object': (outcome) => ({ ...outcome, headers: { 'x-thing': { a: 1 } } }),
  'body-string': (outcome) => ({ ...outcome, body: 'text' }),
};

function malformedHook(outcome: StoredResponse, scope: IdempotencyScope): StoredResponse {
  return MALFORMED[scope.key.slice(0, scope.key.lastIndexOf(':'))](outcome) as StoredResponse;
}

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent()
  @Header('x-card-hint', HEADER_MARKER)
  create(@Body() body: { amount: number }) {
    runs += 1;
    return { id: `ch_${runs}`, amount: body.amount, card: BODY_MARKER };
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  createInTransaction() {
    runs += 1;
    return { id: `ch_${runs}`, card: BODY_MARKER };
  }

  @Post('redacted')
  @Idempotent({ redact: redactCard })
  createRedacted() {
    runs += 1;
    return { id: `ch_${runs}`, card: BODY_MARKER };
  }
}

/** Routes whose redact hook throws, on the PostgreSQL store. */
@Controller('charges/redact-throws')
class BrokenHookController {
  constructor(private readonly postgres: PostgresIdempotencyContext) {}

  @Post('malformed')
  @Idempotent({ redact: malformedHook })
  createWithMalformedHook() {
    runs += 1;
    return { id: `ch_${runs}` };
  }

  @Post()
  @Idempotent({ redact: throwingHook })
  createWithBrokenHook() {
    runs += 1;
    return { id: `ch_${runs}` };
  }

  @Post('transactional')
  @Idempotent({ transactional: true, redact: throwingHook })
  async createInTransactionWithBrokenHook(@Headers('idempotency-key') key: string) {
    const manager = this.postgres.manager;
    if (!manager) throw new Error('a transactional handler runs in its transaction');
    await manager.query('INSERT INTO work_log (key) VALUES ($1)', [key]);
    runs += 1;
    return { id: `ch_${runs}` };
  }
}

async function withApp<T>(
  encryption: OutcomeEncryptionOptions | undefined,
  use: (app: TestApp) => Promise<T>,
  logger = new RecordingLogger(),
): Promise<T> {
  const app = await startTestApp({
    database: db,
    pool: { max: 3 },
    idempotency: { singleTenant: true, encryption, storedResponseHeaders: ['x-card-hint'], replayCache: false },
    controllers: [ChargesController, BrokenHookController],
    listen: false,
    logger,
  });
  try {
    return await use(app);
  } finally {
    await app.close();
  }
}

const charge = (app: TestApp, key: string, path = '/charges') =>
  request(app.app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ amount: 100 });

/** The `recordUnreadable` events published while `use` runs. */
async function unreadableEventsOf(use: () => Promise<void>): Promise<RecordUnreadableEvent[]> {
  const events: RecordUnreadableEvent[] = [];
  const listener = (event: unknown) => events.push(event as RecordUnreadableEvent);
  subscribe(IDEMPOTENCY_CHANNELS.recordUnreadable, listener);
  try {
    await use();
  } finally {
    unsubscribe(IDEMPOTENCY_CHANNELS.recordUnreadable, listener);
  }
  return events;
}

async function storedRowOf(key: string) {
  const [row] = await db.query<{ response_status: number; headers: string; body: Buffer }>(
    'SELECT response_status, response_headers::text AS headers, response_body AS body FROM idempotency_records WHERE idempotency_key = $1',
    [key],
  );
  return row;
}

function expectUnreadableRefusal(response: request.Response) {
  expect(response.status).toBe(500);
  expect(response.body).toMatchObject({ statusCode: 500, error: 'idempotency_record_unreadable' });
  expect(JSON.stringify(response.body)).not.toContain(BODY_MARKER);
}

describe('encryption at rest (PostgreSQL)', () => {
  it('stores no plaintext of the body nor of the headers, keeps the status in clear, and replays the response', async () => {
    const key = randomUUID();
    await withApp({ keys: [keyA] }, async (app) => {
      const first = await charge(app, key).expect(201);
      expect(first.body.card).toBe(BODY_MARKER);
      const row = await storedRowOf(key);
      expect(row?.response_status).toBe(201);
      expect(row?.body.includes(Buffer.from(BODY_MARKER))).toBe(false);
      expect(row?.body.includes(Buffer.from('"amount"'))).toBe(false);
      expect(row?.headers).not.toContain(HEADER_MARKER);
      expect(row?.headers).not.toContain('application/json');
      const replay = await charge(app, key).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.headers['x-card-hint']).toBe(HEADER_MARKER);
      expect(replay.body).toEqual(first.body);
    });
  });

  it('seals the outcome a transactional route commits with its writes', async () => {
    const key = randomUUID();
    await withApp({ keys: [keyA] }, async (app) => {
      const first = await charge(app, key, '/charges/transactional').expect(201);
      expect((await storedRowOf(key))?.body.includes(Buffer.from(BODY_MARKER))).toBe(false);
      expect((await charge(app, key, '/charges/transactional').expect(201)).body).toEqual(first.body);
    });
  });

  it('replays records sealed with key A after the ring becomes [B, A], and seals new ones with B', async () => {
    const before = randomUUID();
    const first = await withApp({ keys: [keyA] }, async (app) => (await charge(app, before).expect(201)).body);
    const runsBefore = runs;
    await withApp({ keys: [keyB, keyA] }, async (app) => {
      expect((await charge(app, before).expect(201)).body).toEqual(first);
      const after = randomUUID();
      await charge(app, after).expect(201);
      const row = await storedRowOf(after);
      expect(row?.body.subarray(2, 2 + keyB.id.length).toString()).toBe(keyB.id);
    });
    expect(runs).toBe(runsBefore + 1); // the new key only
  });

  it('refuses a record whose key left the ring, with the event naming the key id, and never runs it again (a reuse: 422)', async () => {
    const key = randomUUID();
    await withApp({ keys: [keyA] }, (app) => charge(app, key).expect(201));
    const runsBefore = runs;
    const logger = new RecordingLogger();
    const events = await unreadableEventsOf(() =>
      withApp(
        { keys: [keyB] },
        async (app) => {
          expectUnreadableRefusal(await charge(app, key));
          expectUnreadableRefusal(await charge(app, key));
          // The key with another request is refused as reused, whether or not its outcome can be read.
          const reused = request(app.app.getHttpServer()).post('/charges').set('Idempotency-Key', key);
          await reused.send({ amount: 200 }).expect(422);
        },
        logger,
      ),
    );
    expect(runs).toBe(runsBefore);
    expect(events).toEqual([
      {
        scope: expect.objectContaining({ key }),
        reason: expect.stringMatching(/key "key-a", which is not in the key ring/),
      },
      { scope: expect.objectContaining({ key }), reason: expect.stringMatching(/key "key-a"/) },
      { scope: expect.objectContaining({ key }), reason: expect.stringMatching(/key "key-a"/) },
    ]);
    // Logged once per scope, naming what to do.
    expect(logger.errors).toEqual([expect.stringMatching(/cannot be read: .*key-a.*put the key that sealed it back/)]);
    expect(await recordCountOf(db, key)).toBe(1);
  });

  /** `key`'s retry is refused as unreadable for `reason`, with one event and one log line, and its handler not run. */
  async function expectRefusedUnrun(key: string, reason: RegExp) {
    const runsBefore = runs;
    const logger = new RecordingLogger();
    const events = await unreadableEventsOf(() =>
      withApp({ keys: [keyA] }, async (app) => expectUnreadableRefusal(await charge(app, key)), logger),
    );
    expect(runs).toBe(runsBefore);
    expect(events).toEqual([{ scope: expect.objectContaining({ key }), reason: expect.stringMatching(reason) }]);
    expect(logger.errors).toHaveLength(1);
  }

  it("refuses a record whose encrypted body was copied from another key's row, and never runs its handler again", async () => {
    const victim = randomUUID();
    const source = randomUUID();
    await withApp({ keys: [keyA] }, async (app) => {
      await charge(app, victim).expect(201);
      await charge(app, source).expect(201);
    });
    await db.query(
      `UPDATE idempotency_records SET response_body = (SELECT response_body FROM idempotency_records WHERE idempotency_key = $2)
       WHERE idempotency_key = $1`,
      [victim, source],
    );
    await expectRefusedUnrun(victim, /authentication failed/);
  });

  it('refuses a record whose status column was rewritten (a 201 made 500), and never runs its handler again', async () => {
    const key = randomUUID();
    await withApp({ keys: [keyA] }, async (app) => charge(app, key).expect(201));
    await db.query('UPDATE idempotency_records SET response_status = 500 WHERE idempotency_key = $1', [key]);
    await expectRefusedUnrun(key, /status column says 500/);
  });

  it('refuses a plaintext record unless acceptPlaintext, which replays it during a switch-over', async () => {
    const key = randomUUID();
    const first = await withApp(undefined, async (app) => (await charge(app, key).expect(201)).body);
    expect((await storedRowOf(key))?.body.includes(Buffer.from(BODY_MARKER))).toBe(true);
    const runsBefore = runs;
    const events = await unreadableEventsOf(() =>
      withApp({ keys: [keyA] }, async (app) => expectUnreadableRefusal(await charge(app, key))),
    );
    expect(events).toEqual([expect.objectContaining({ reason: expect.stringMatching(/plaintext/) })]);
    await withApp({ keys: [keyA], acceptPlaintext: true }, async (app) => {
      expect((await charge(app, key).expect(201)).body).toEqual(first);
    });
    expect(runs).toBe(runsBefore);
  });

  it('refuses to start with a key that is not 32 bytes, naming the fix', async () => {
    await expect(withApp({ keys: [{ id: 'short', key: randomBytes(16) }] }, async () => undefined)).rejects.toThrow(
      /encryption.keys\[0\].key \(id "short"\) must be 32 bytes/,
    );
  });
});

describe('encryption from forRootAsync (keys from a secrets manager)', () => {
  it('seals with the ring its factory resolved', async () => {
    const app = await startTestApp({
      database: db,
      pool: { max: 2 },
      idempotencyAsync: {
        useFactory: async () => ({ singleTenant: true, encryption: { keys: [keyB] }, replayCache: false }),
      },
      controllers: [ChargesController],
      listen: false,
    });
    try {
      const key = randomUUID();
      const first = await charge(app, key).expect(201);
      expect((await storedRowOf(key))?.body.includes(Buffer.from(BODY_MARKER))).toBe(false);
      expect((await charge(app, key).expect(201)).body).toEqual(first.body);
    } finally {
      await app.close();
    }
  });
});

describe('encryption on the in-memory store', () => {
  it('holds the outcome sealed, and replays it', async () => {
    const store = new InMemoryIdempotencyStore();
    const app = await startTestApp({
      database: 'memory',
      store,
      idempotency: { singleTenant: true, encryption: { keys: [keyA] }, replayCache: false },
      controllers: [ChargesController],
      listen: false,
    });
    try {
      const key = randomUUID();
      const first = await charge(app, key).expect(201);
      const claimed = await store.claim({ account: '', endpoint: 'POST /charges', key }, 'another', randomUUID(), {
        leaseSeconds: 1,
        ttlSeconds: 1,
      });
      expect(claimed).toMatchObject({ claimed: false, existing: { status: 'completed' } });
      const held = claimed.claimed ? undefined : claimed.existing;
      expect(held?.status === 'completed' && held.response.body.includes(Buffer.from(BODY_MARKER))).toBe(false);
      expect((await charge(app, key).expect(201)).body).toEqual(first.body);
    } finally {
      await app.close();
    }
  });
});

describe('the redact hook', () => {
  it('changes what a replay returns, not the first answer', async () => {
    const key = randomUUID();
    await withApp({ keys: [keyA] }, async (app) => {
      const first = await charge(app, key, '/charges/redacted').expect(201);
      expect(first.body.card).toBe(BODY_MARKER);
      const replay = await charge(app, key, '/charges/redacted').expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.body).toEqual({ id: first.body.id, card: '[redacted]' });
    });
  });

  it('stores a stand-in when it throws on a standard route: the first answer and every retry 500 idempotency_outcome_withheld, the handler run once', async () => {
    const key = randomUUID();
    const logger = new RecordingLogger();
    const runsBefore = runs;
    const withReplayCache = await startTestApp({
      database: db,
      pool: { max: 3 },
      idempotency: { singleTenant: true, encryption: { keys: [keyA] } },
      controllers: [BrokenHookController],
      listen: false,
      logger,
    });
    try {
      const first = await charge(withReplayCache, key, '/charges/redact-throws').expect(500);
      expect(first.body).toEqual({
        statusCode: 500,
        error: 'idempotency_outcome_withheld',
        message: expect.stringContaining('does not process the request again'),
      });
      // Retried on the instance that stored it (from its memory), and on another (from the store).
      expect((await charge(withReplayCache, key, '/charges/redact-throws').expect(500)).body).toEqual(first.body);
      await withApp({ keys: [keyA] }, async (other) => {
        expect((await charge(other, key, '/charges/redact-throws').expect(500)).body).toEqual(first.body);
      });
    } finally {
      await withReplayCache.close();
    }
    expect(runs).toBe(runsBefore + 1);
    // The stand-in is sealed like any outcome: its status in clear, nothing else.
    const row = await storedRowOf(key);
    expect(row.response_status).toBe(500);
    expect(row.headers).not.toContain('withheld');
    expect(logger.errors).toEqual([
      expect.stringMatching(/The redact hook threw on the outcome.*a stand-in is stored.*Make the hook total/),
    ]);
  });

  it.each(Object.keys(MALFORMED))(
    'takes a value the store cannot hold (%s) as a throw: withheld, the handler run once',
    async (malformed) => {
      const key = `${malformed}:${randomUUID()}`;
      const runsBefore = runs;
      const logger = new RecordingLogger();
      await withApp(
        { keys: [keyA] },
        async (app) => {
          for (let call = 0; call < 3; call += 1) {
            const answer = await charge(app, key, '/charges/redact-throws/malformed').expect(500);
            expect(answer.body).toMatchObject({ error: 'idempotency_outcome_withheld' });
          }
        },
        logger,
      );
      expect(runs).toBe(runsBefore + 1);
      expect(logger.errors).toEqual([expect.stringContaining('it returned no { status, headers, body } outcome')]);
    },
  );

  it('stores nothing when it throws on a transactional route: the writes rolled back, the claim released, 500 idempotency_misconfigured', async () => {
    const key = randomUUID();
    const logger = new RecordingLogger();
    await withApp(
      undefined,
      async (app) => {
        const runsBefore = runs;
        const answer = await charge(app, key, '/charges/redact-throws/transactional').expect(500);
        expect(answer.body).toMatchObject({ error: 'idempotency_misconfigured' });
        expect(await recordCountOf(db, key)).toBe(0);
        await charge(app, key, '/charges/redact-throws/transactional').expect(500);
        expect(runs).toBe(runsBefore + 2);
        expect(await workRowsOf(db, key)).toEqual([]);
      },
      logger,
    );
    expect(logger.errors).toContainEqual(
      expect.stringMatching(/The redact hook threw on the outcome.*writes are rolled back.*Make the hook total/),
    );
  });
});

describe('execute() with encryption', () => {
  it('stores the result encrypted, and replays it', async () => {
    const testContext = await startTestContext({
      database: db,
      pool: { max: 2 },
      idempotency: { singleTenant: true, encryption: { keys: [keyA] }, replayCache: false },
    });
    try {
      const service = testContext.context.get(IdempotencyService);
      const operation = { name: 'payout', key: randomUUID(), input: { amount: 5 } };
      const work = async () => ({ payout: BODY_MARKER });
      expect(await service.execute(operation, work)).toEqual({ result: { payout: BODY_MARKER }, replayed: false });
      const row = await storedRowOf(operation.key);
      expect(row?.body.includes(Buffer.from(BODY_MARKER))).toBe(false);
      expect(await service.execute(operation, work)).toEqual({ result: { payout: BODY_MARKER }, replayed: true });
    } finally {
      await testContext.close();
    }
  });
});
