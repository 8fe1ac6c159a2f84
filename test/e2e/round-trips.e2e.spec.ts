import { randomUUID } from 'node:crypto';
import { Controller, type INestApplication, Post } from '@nestjs/common';
import request from 'supertest';
import { Idempotent } from '../../src/index.js';
import { sha256Fingerprint } from '../../src/http/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { Gate } from '../support/gate.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { PLATFORMS } from '../support/platforms.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestApp } from '../support/test-app.js';

let gate: Gate | undefined;

@Controller('rt')
class RoundTripController {
  constructor(private readonly context: PostgresIdempotencyContext) {}

  /** No database work of its own: every round trip counted is the module's. */
  @Post('standard')
  @Idempotent()
  async standard() {
    await gate?.pass();
    return { ok: true };
  }

  /** One insert of its own, in the run's transaction. */
  @Post('transactional')
  @Idempotent({ transactional: true })
  async transactional() {
    await this.context.manager!.query('INSERT INTO rt_rows (key) VALUES ($1)', [this.context.run!.key]);
    return { ok: true };
  }
}

let db: TestDatabase;
let proxy: TcpProxy;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query('CREATE TABLE rt_rows (key text PRIMARY KEY)');
  proxy = await TcpProxy.to(db.url);
});

afterAll(async () => {
  gate?.release();
  await proxy?.close();
  await db?.drop();
});

describe.each(PLATFORMS)('on %s', (platform) => {
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await startTestApp({
      platform,
      database: { url: proxy.urlFor(db.url) },
      idempotency: { accountResolver: () => 'acct' },
      controllers: [RoundTripController],
    }));
    // Warm up: open the pooled connections and prepare the statements, which are not per-request costs.
    for (let i = 0; i < 12; i += 1) {
      await Promise.all([send('/rt/standard', randomUUID()), send('/rt/transactional', randomUUID())]);
    }
  });

  afterAll(async () => {
    gate?.release();
    await app?.close();
  });

  function send(path: string, key: string, body: object = {}) {
    return request(url).post(path).set('Idempotency-Key', key).send(body);
  }

  const EMPTY_BODY_FINGERPRINT = sha256Fingerprint({
    method: 'POST',
    url: '/rt/standard',
    contentType: 'application/json',
    body: Buffer.from('{}'),
  });

  /** A key of `/rt/standard` completed by another instance of the app: this one has never seen it. */
  async function completedElsewhere(): Promise<string> {
    const key = randomUUID();
    await db.query(
      `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, completed_at,
                                      expires_at, response_status, response_headers, response_body)
     VALUES ('acct', 'POST /rt/standard', $1, $2, 'completed', gen_random_uuid(), now(), now(), now() + interval '1 hour',
             201, '{"content-type": "application/json; charset=utf-8"}', convert_to('{"ok":true}', 'UTF8'))`,
      [key, EMPTY_BODY_FINGERPRINT],
    );
    return key;
  }

  /** The database round trips one request costs. */
  async function roundTripsOf(requesting: () => PromiseLike<unknown>): Promise<number> {
    const before = proxy.roundTrips;
    await requesting();
    return proxy.roundTrips - before;
  }

  describe('database round trips per request', () => {
    it('a new key: one to claim, one to store the outcome', async () => {
      await expect(roundTripsOf(() => send('/rt/standard', randomUUID()).expect(201))).resolves.toBe(2);
    });

    it('a replay and a reused key: none when this process knows the outcome, one when it reads it', async () => {
      const key = randomUUID();
      await send('/rt/standard', key).expect(201);
      await expect(roundTripsOf(() => send('/rt/standard', key).expect(201))).resolves.toBe(0);
      await expect(roundTripsOf(() => send('/rt/standard', key, { other: 1 }).expect(422))).resolves.toBe(0);

      // Completed by another instance: read once, then known.
      const replayed = await completedElsewhere();
      await expect(roundTripsOf(() => send('/rt/standard', replayed).expect(201))).resolves.toBe(1);
      await expect(roundTripsOf(() => send('/rt/standard', replayed).expect(201))).resolves.toBe(0);
      const reused = await completedElsewhere();
      await expect(roundTripsOf(() => send('/rt/standard', reused, { other: 1 }).expect(422))).resolves.toBe(1);
      await expect(roundTripsOf(() => send('/rt/standard', reused).expect(201))).resolves.toBe(0);
    });

    it('a key in progress: one', async () => {
      const held = randomUUID();
      gate = new Gate();
      const first = send('/rt/standard', held).then((response) => response);
      await gate.reached;
      await expect(roundTripsOf(() => send('/rt/standard', held).expect(409))).resolves.toBe(1);
      gate.release();
      gate = undefined;
      expect((await first).status).toBe(201);
    });

    it('a takeover of a lapsed lease: one to claim, one to store the outcome', async () => {
      const key = randomUUID();
      await db.query(
        `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, locked_until, expires_at)
       VALUES ('acct', 'POST /rt/standard', $1, $2, 'in_progress', gen_random_uuid(), now(), now() - interval '1 second', now() + interval '1 hour')`,
        [key, EMPTY_BODY_FINGERPRINT],
      );
      await expect(roundTripsOf(() => send('/rt/standard', key).expect(201))).resolves.toBe(2);
    });

    it("transactional: the handler's own transaction with the key's lock, the claim, the outcome in the transaction, and one commit", async () => {
      // START TRANSACTION with the key's advisory lock (one simple query); claim; the handler's INSERT; the outcome's UPDATE; COMMIT
      await expect(roundTripsOf(() => send('/rt/transactional', randomUUID()).expect(201))).resolves.toBe(5);
    });
  });
});
