import { randomUUID } from 'node:crypto';
import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  HttpException,
  Injectable,
  type NestInterceptor,
  Post,
  Req,
  RequestTimeoutException,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { mergeMap, race, Subject, take, throwError } from 'rxjs';
import { InjectDataSource } from '@nestjs/typeorm';
import pg from 'pg';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyRun } from '../../src/index.js';
import { sha256Fingerprint } from '../../src/http/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { GateQueue } from '../support/gate.js';
import { expectHeldThroughout } from '../support/lease.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { PLATFORMS, type PlatformRequest as Request } from '../support/platforms.js';
import { useTestDatabase } from '../support/test-database.js';
import { describeOnStores, onPostgresOnly } from '../support/on-each-store.js';
import { REDIS_URL } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { recordsOf, useTestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';
import { CHECKED_AT_COMMIT, expectRefusedKeepingNothing, WORK_LOG, workRowsOf } from '../support/work-log.js';

/** The gate the next request to a gated route waits at (each gate holds one request). */
const gates = new GateQueue();
const holdNext = () => gates.holdNext();
const passGate = (req?: Request) => gates.pass(req);

/** Answers 408 from outside the idempotency interceptor when the test says so, as a timeout interceptor would. */
const outerTimeouts = new Subject<void>();
@Injectable()
class OuterTimeoutInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    if (!context.switchToHttp().getRequest<Request>().headers['x-outer-timeout']) return next.handle();
    return race(
      next.handle(),
      outerTimeouts.pipe(
        take(1),
        mergeMap(() => throwError(() => new RequestTimeoutException())),
      ),
    );
  }
}

interface WriteBody {
  fail?: 'declined' | 'error';
  gated?: boolean;
}

@Controller('tx')
@Idempotent({ transactional: true })
class TransactionalController {
  constructor(private readonly context: PostgresIdempotencyContext) {}

  /** Writes a row in the request's transaction, then answers as asked. */
  @Post('write')
  async write(@Body() body: WriteBody, @Req() req: Request) {
    const { manager, run } = this.context;
    const [{ id }] = await manager!.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [run!.key]);
    if (body.gated) await passGate(req);
    if (body.fail === 'declined') throw new HttpException({ error: 'card_declined' }, 402);
    if (body.fail === 'error') throw new Error('the handler failed after writing');
    return { id };
  }

  /** Breaks a constraint checked only at commit: the outcome cannot be committed. */
  @Post('fails-at-commit')
  async failsAtCommit() {
    await this.context.manager!.query('INSERT INTO checked_at_commit (v) VALUES (1), (1)');
    return { committed: 'never' };
  }

  @Post('context')
  context_() {
    const run = this.context.run!;
    return {
      key: run.key,
      account: run.scope.account,
      takeover: run.takeover,
      provider: this.context.deriveKey('provider'),
    };
  }

  /** A hung handler: it outlives its maximum hold. */
  @Post('hung')
  @Idempotent({ maxHoldSeconds: 1 })
  async hung(@Req() req: Request) {
    const [{ id }] = await this.context.manager!.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      this.context.run!.key,
    ]);
    await passGate(req);
    return { id };
  }
}

@Controller('std')
@Idempotent()
class StandardController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('write')
  async write(@Req() req: Request) {
    const [{ id }] = await this.dataSource.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      req.headers['idempotency-key'],
    ]);
    await passGate(req);
    return { id };
  }

  @Post('wait')
  @Idempotent({ inFlight: 'wait' })
  async wait(@Req() req: Request) {
    return this.write(req);
  }

  /** A hung handler: it outlives its maximum hold. */
  @Post('hung')
  @Idempotent({ maxHoldSeconds: 1 })
  async hung(@Req() req: Request) {
    return this.write(req);
  }

  /** Waits far longer than any test: an answer before that came from a notification, not the wait's end. */
  @Post('wait-long')
  @Idempotent({ inFlight: 'wait', inFlightWaitSeconds: 600 })
  async waitLong(@Req() req: Request) {
    return this.write(req);
  }
}

const db = useTestDatabase(WORK_LOG, CHECKED_AT_COMMIT);

describeOnStores('records on %s', (store) => {
  /** In front of the store's server (the file's database, or Redis), to take it away. */
  const proxy = useTcpProxy({
    get url() {
      return store === 'redis' ? REDIS_URL : db.url;
    },
  });

  describe.each(PLATFORMS)('on %s', (platform) => {
    /** What the application of this platform logs. */
    const logger = new RecordingLogger();
    const server = useTestApp(
      () => ({
        platform,
        // On Redis, the handlers' rows go to the database straight: only the store is taken away.
        ...(store === 'redis'
          ? { redis: { url: proxy.urlFor(REDIS_URL) }, database: db }
          : { database: { url: proxy.urlFor(db.url) }, pool: { connectionTimeoutMillis: 1000 } }),
        idempotency: {
          accountResolver: () => 'acct',
          leaseSeconds: 1,
          storeTimeoutSeconds: 2,
          inFlightWaitSeconds: 2,
          finalizeRetries: 3,
        },
        controllers: store === 'postgres' ? [TransactionalController, StandardController] : [StandardController],
        providers: [{ provide: APP_INTERCEPTOR, useClass: OuterTimeoutInterceptor }],
        logger,
      }),
      // A failed test may leave a handler at its gate, or the database down: the server cannot close before it answers.
      () => {
        proxy.bringUp();
        gates.releaseAll();
      },
    );

    const post = (path: string, key: string, body: object = {}) =>
      request(server.url).post(path).set('Idempotency-Key', key).send(body);
    const rowsOf = (key: string) => workRowsOf(db, key);
    const records = recordsOf(server, db);
    const recordOf = async (key: string) => {
      const record = await records.of(key);
      return record && { status: record.status, response_status: record.responseStatus };
    };

    /** Sends a request that waits at a gate inside its handler; resolves once it is there. */
    async function sendHeld(path: string, key: string, body: object = {}) {
      const gate = holdNext();
      const answer = post(path, key, body).then((response) => response);
      await gate.reached;
      return { gate, answer };
    }

    /** Retries until the key is no longer held by another attempt (409) or the store is back (503). */
    const retryUntilRun = (path: string, key: string, body: object = {}) =>
      waitFor(async () => {
        const response = await post(path, key, body);
        return response.status === 409 || response.status === 503 ? undefined : response;
      }, `a retry of ${path} to run`);

    describeWith(onPostgresOnly(store, 'transactional mode'), 'transactional mode', () => {
      it("commits the handler's writes and the stored response together", async () => {
        const key = randomUUID();
        const first = await post('/tx/write', key).expect(201);
        await expect(rowsOf(key)).resolves.toEqual([{ id: first.body.id }]);
        await expect(recordOf(key)).resolves.toEqual({ status: 'completed', response_status: 201 });
        const replay = await post('/tx/write', key).expect(201);
        expect(replay.text).toBe(first.text);
        await expect(rowsOf(key)).resolves.toHaveLength(1);
      });

      it('rolls the writes back on a final error (402), and stores and replays that error', async () => {
        const key = randomUUID();
        await post('/tx/write', key, { fail: 'declined' }).expect(402);
        await expect(rowsOf(key)).resolves.toEqual([]);
        await expect(recordOf(key)).resolves.toEqual({ status: 'completed', response_status: 402 });
        const replay = await post('/tx/write', key, { fail: 'declined' }).expect(402);
        expect(replay.headers['idempotent-replay']).toBe('true');
      });

      it('rolls the writes back and releases the claim on an unexpected error, so a retry runs again', async () => {
        const key = randomUUID();
        await post('/tx/write', key, { fail: 'error' }).expect(500);
        await expect(rowsOf(key)).resolves.toEqual([]);
        await expect(recordOf(key)).resolves.toBeUndefined();
      });

      it("answers 503 instead of the handler's response when the commit fails, keeping nothing", async () => {
        const key = randomUUID();
        const response = await post('/tx/fails-at-commit', key).expect(503);
        await expectRefusedKeepingNothing(db, key, response);
      });

      it("takes no answer given before the handler is done (an outer timeout) for its outcome: the handler's own outcome commits and replays", async () => {
        const key = randomUUID();
        const gate = holdNext();
        const answer = request(server.url)
          .post('/tx/write')
          .set('Idempotency-Key', key)
          .set('X-Outer-Timeout', 'yes')
          .send({ gated: true });
        const answered = answer.then((response) => response);
        await gate.reached;
        outerTimeouts.next();
        // The timeout's answer goes out at once, while the handler still waits at its gate, holding the key.
        expect((await answered).status).toBe(408);
        await expect(recordOf(key)).resolves.toMatchObject({ status: 'in_progress' });
        await post('/tx/write', key, { gated: true }).expect(409);
        gate.release();
        // Once the handler is done, its own outcome (not the timeout) commits with its write, and a retry replays it.
        await waitFor(
          async () => ((await recordOf(key))?.status === 'completed' ? true : undefined),
          'the outcome to be stored',
        );
        const rows = await rowsOf(key);
        expect(rows).toHaveLength(1);
        const replay = await post('/tx/write', key, { gated: true }).expect(201);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.body).toEqual({ id: rows[0].id });
      });

      it('tells the handler its key, scope and a stable derived key for downstream calls', async () => {
        const [a, b] = [randomUUID(), randomUUID()];
        const first = await post('/tx/context', a).expect(201);
        expect(first.body).toMatchObject({ key: a, account: 'acct', takeover: false });
        const other = await post('/tx/context', b).expect(201);
        expect(other.body.provider).not.toBe(first.body.provider);
        expect(first.body.provider).toMatch(/^[A-Za-z0-9_-]{43}$/);
      });

      it('tells the handler when it took the key over from an attempt whose lease lapsed, with the same derived key', async () => {
        const key = randomUUID();
        const fingerprint = sha256Fingerprint({
          method: 'POST',
          url: '/tx/context',
          contentType: 'application/json',
          body: Buffer.from('{}'),
        });
        await db.query(
          `INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, locked_until, expires_at)
       VALUES ('acct', 'POST /tx/context', $1, $2, 'in_progress', gen_random_uuid(), now(), now() - interval '1 second', now() + interval '1 hour')`,
          [key, fingerprint],
        );
        const takeover = await post('/tx/context', key).expect(201);
        expect(takeover.body.takeover).toBe(true);
        const anyAttempt = new IdempotencyRun(
          { scope: { account: 'acct', endpoint: 'POST /tx/context', key }, attempt: randomUUID() },
          false,
        );
        expect(takeover.body.provider).toBe(anyAttempt.deriveKey('provider'));
        const fresh = await post('/tx/context', randomUUID()).expect(201);
        expect(fresh.body.takeover).toBe(false);
      });
    });

    describe('in-flight waiting (inFlight: wait)', () => {
      it("gives a concurrent request the first attempt's outcome once it is stored, woken by its notification", async () => {
        const key = randomUUID();
        const { gate, answer: first } = await sendHeld('/std/wait-long', key);
        const second = post('/std/wait-long', key).then((response) => response);
        await waitFor(
          async () => ((await records.of(key))?.awaited ? true : undefined),
          'the waiting request to mark the record awaited',
        );
        gate.release();
        const [a, b] = await Promise.all([first, second]);
        expect(a.status).toBe(201);
        expect(b.status).toBe(201);
        expect(b.headers['idempotent-replay']).toBe('true');
        expect(b.text).toBe(a.text);
        await expect(rowsOf(key)).resolves.toHaveLength(1);
      });

      it('answers 409 once the wait is over and the first attempt is still running', async () => {
        const key = randomUUID();
        const { gate, answer: first } = await sendHeld('/std/wait', key);
        const second = await post('/std/wait', key).expect(409);
        expect(second.body.error).toBe('request_in_progress');
        gate.release();
        expect((await first).status).toBe(201);
      });
    });

    describe('leases', () => {
      /** A request hangs at its gate until a retry has taken its key over (201); then it is let go. Both answers. */
      async function takenOverWhileHung(path: string, key: string) {
        const { gate, answer: hung } = await sendHeld(path, key);
        const taker = await retryUntilRun(path, key);
        expect(taker.status).toBe(201);
        gate.release();
        return { taker, late: await hung };
      }

      it('are renewed while a slow handler runs: for three leases, the key never stops being held', async () => {
        const key = randomUUID();
        const { gate, answer: first } = await sendHeld('/std/write', key);
        await expectHeldThroughout(records, key, 3, () => post('/std/write', key).expect(409));
        gate.release();
        expect((await first).status).toBe(201);
        await expect(rowsOf(key)).resolves.toHaveLength(1);
      });

      (store === 'postgres' ? it : it.skip)(
        "stop being renewed after maxHoldSeconds; a retry takes the key over, and the hung attempt is fenced off (transactional: PostgreSQL's alone)",
        async () => {
          const key = randomUUID();
          const { taker, late } = await takenOverWhileHung('/tx/hung', key);
          // The hung attempt cannot store its outcome: its client is told to retry, and its writes are rolled back.
          expect(late.status).toBe(409);
          await expect(rowsOf(key)).resolves.toEqual([{ id: taker.body.id }]);
          const replay = await post('/tx/hung', key).expect(201);
          expect(replay.body).toEqual(taker.body);
          expect(logger.warnings).toContain(
            `WARN [Idempotency] The handler of key "${key}" of POST /tx/hung has run past maxHoldSeconds (1 s): its lease is no ` +
              'longer renewed, and a retry may take the key over once it lapses; its transaction is cut (rolled back), so that ' +
              'its row locks do not block the retry.',
          );
        },
      );

      it('fence off a hung attempt in standard mode too: it answers 409, not its own unstored answer', async () => {
        const key = randomUUID();
        const { taker, late } = await takenOverWhileHung('/std/hung', key);
        expect(late.status).toBe(409);
        expect(late.body.error).toBe('request_in_progress');
        const replay = await post('/std/hung', key).expect(201);
        expect(replay.body).toEqual(taker.body);
      });
    });

    describe('when the store goes away', () => {
      afterEach(() => proxy.bringUp());

      it('refuses requests with 503 at the claim without running the handler, and recovers by itself', async () => {
        const key = randomUUID();
        proxy.takeDown();
        const refused = await post('/std/write', key).expect(503);
        expect(refused.body.error).toBe('idempotency_store_unavailable');
        expect(refused.headers['retry-after']).toBe('2');
        await expect(rowsOf(key)).resolves.toEqual([]);
        proxy.bringUp();
        await retryUntilRun('/std/write', key);
        await expect(rowsOf(key)).resolves.toHaveLength(1);
      });

      it('still answers when it is lost after the work (standard mode), and stores the outcome once it is back', async () => {
        const key = randomUUID();
        const { gate, answer: first } = await sendHeld('/std/write', key);
        proxy.takeDown();
        gate.release();
        const answered = await first;
        expect(answered.status).toBe(201);
        proxy.bringUp();
        await waitFor(
          async () => ((await recordOf(key))?.status === 'completed' ? true : undefined),
          'the finalize retry',
        );
        const replay = await post('/std/write', key).expect(201);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(answered.text);
      });

      // On Redis, ioredis keeps the finalize's commands while it reconnects: see the test after this one.
      (store === 'postgres' ? it : it.skip)(
        'gives up finalizing after finalizeRetries, says so, and the key runs again once its lease lapses',
        async () => {
          const key = randomUUID();
          const { gate, answer: first } = await sendHeld('/std/write', key);
          proxy.takeDown();
          gate.release();
          expect((await first).status).toBe(201);
          const gaveUp =
            `ERROR [Idempotency] Gave up finalizing key "${key}" of POST /std/write after 3 retries (Error: Connection terminated ` +
            'unexpectedly). The key stays in progress until its lease lapses (its retries refused as in progress, or held by ' +
            'a consumer), then the first one runs the handler again.';
          await waitFor(async () => (logger.errors.includes(gaveUp) ? true : undefined), 'the finalize to give up');
          proxy.bringUp();
          await expect(recordOf(key)).resolves.toMatchObject({ status: 'in_progress' });
          const rerun = await retryUntilRun('/std/write', key);
          expect(rerun.status).toBe(201);
          expect(rerun.headers['idempotent-replay']).toBeUndefined();
          await expect(rowsOf(key)).resolves.toHaveLength(2);
        },
      );

      // ioredis (at its defaults, as applications have it) keeps the commands sent while it reconnects, and sends them
      // once it is back: a finalize that timed out still stores the outcome then (its attempt still holds the record).
      // The store's behaviour, not the platform's: on one of them.
      (store === 'redis' && platform === 'express' ? it : it.skip)(
        'gives up finalizing after finalizeRetries and says so; the outcome is stored once Redis is back, and replayed (Redis, once)',
        async () => {
          const key = randomUUID();
          const { gate, answer: first } = await sendHeld('/std/write', key);
          proxy.takeDown();
          gate.release();
          const answered = await first;
          expect(answered.status).toBe(201);
          const gaveUp =
            `ERROR [Idempotency] Gave up finalizing key "${key}" of POST /std/write after 3 retries (Error: storing the ` +
            'outcome took longer than storeTimeoutSeconds (2 s)). The key stays in progress until its lease lapses (its ' +
            'retries refused as in progress, or held by a consumer), then the first one runs the handler again.';
          // Each try waits storeTimeoutSeconds for an answer that does not come.
          await waitFor(
            async () => (logger.errors.includes(gaveUp) ? true : undefined),
            'the finalize to give up',
            30_000,
          );
          proxy.bringUp();
          await waitFor(
            async () => ((await recordOf(key))?.status === 'completed' ? true : undefined),
            'the outcome to be stored after all',
          );
          const replay = await post('/std/write', key).expect(201);
          expect(replay.headers['idempotent-replay']).toBe('true');
          expect(replay.text).toBe(answered.text);
          await expect(rowsOf(key)).resolves.toHaveLength(1);
        },
      );

      (store === 'postgres' ? it : it.skip)(
        "answers 503 within bounds when the outcome cannot be written in the transaction, and keeps nothing (transactional: PostgreSQL's alone)",
        async () => {
          const key = randomUUID();
          const { gate, answer } = await sendHeld('/tx/write', key, { gated: true });
          // Another session holds the record: the outcome's UPDATE, then the rollback behind it, stall.
          const locker = new pg.Client({ connectionString: db.url });
          await locker.connect();
          await locker.query('BEGIN');
          await locker.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 FOR UPDATE', [key]);
          try {
            gate.release();
            const refused = await answer;
            expect(refused.status).toBe(503);
            expect(refused.body.error).toBe('idempotency_store_unavailable');
          } finally {
            await locker.query('ROLLBACK');
            await locker.end();
          }
          await expect(rowsOf(key)).resolves.toEqual([]);
          await waitFor(
            async () => ((await recordOf(key)) === undefined ? true : undefined),
            'the claim to be released',
          );
        },
      );

      (store === 'postgres' ? it : it.skip)(
        "answers 503 in transactional mode when it is lost before the commit, keeping nothing; the retry runs once (PostgreSQL's alone)",
        async () => {
          const key = randomUUID();
          const { gate, answer: first } = await sendHeld('/tx/write', key, { gated: true });
          proxy.takeDown();
          gate.release();
          const refused = await first;
          expect(refused.status).toBe(503);
          proxy.bringUp();
          await expect(rowsOf(key)).resolves.toEqual([]);
          const retry = await retryUntilRun('/tx/write', key, { gated: true });
          expect(retry.status).toBe(201);
          await expect(rowsOf(key)).resolves.toEqual([{ id: retry.body.id }]);
        },
      );
    });
  });
});
