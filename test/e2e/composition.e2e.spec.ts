import { randomUUID } from 'node:crypto';
import { type IncomingMessage, request as httpRequest } from 'node:http';
import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  GatewayTimeoutException,
  HttpException,
  Injectable,
  type NestInterceptor,
  type PipeTransform,
  Post,
  Req,
  RequestTimeoutException,
  Res,
  StreamableFile,
  UseInterceptors,
} from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { catchError, from, map, throwError, timeout, TimeoutError } from 'rxjs';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { GateQueue } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import {
  headerOf,
  PLATFORMS,
  type PlatformRequest as Request,
  type PlatformResponse as Response,
  rawResponseOf,
} from '../support/platforms.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { useTestDatabase } from '../support/test-database.js';
import { describeOnStores, onPostgresOnly } from '../support/on-each-store.js';
import { describeWith } from '../support/required-service.js';
import { modesOn, recordsOf, recordsOn, type StandardStore, useTestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';
import {
  CHECKED_AT_COMMIT,
  expectOneRunReplayed,
  expectRefusedKeepingNothing,
  expectReplayOfOneRun,
  outcomeStored,
  WORK_LOG,
  workRowsOf,
} from '../support/work-log.js';

/**
 * The module inside apps built the way real ones are: timeout interceptors between it and the handler, handlers
 * that write their own answer, a database connection lost under a handler.
 */

/** The gate the next handler (or pipe) waits at; each gate holds one request. */
const gates = new GateQueue();
const holdNext = () => gates.holdNext();
const passGate = (req?: Request) => gates.pass(req);

/**
 * The `TimeoutInterceptor` of Nest's documentation, armed by a request header: it errors the handler's
 * Observable after that many milliseconds, while the handler's promise runs on.
 */
function timeoutInterceptor(header: string, answer: () => HttpException) {
  @Injectable()
  class TimeoutInterceptor implements NestInterceptor {
    intercept(context: ExecutionContext, next: CallHandler) {
      const ms = headerOf(context.switchToHttp().getRequest<Request>(), header);
      if (!ms) return next.handle();
      return next.handle().pipe(
        timeout(Number(ms)),
        catchError((error: unknown) => throwError(() => (error instanceof TimeoutError ? answer() : error))),
      );
    }
  }
  return TimeoutInterceptor;
}
const ControllerTimeout = timeoutInterceptor('x-controller-timeout-ms', () => new GatewayTimeoutException());
const GlobalTimeout = timeoutInterceptor('x-global-timeout-ms', () => new RequestTimeoutException());

interface WorkBody {
  /** What the handler does once past its gate. */
  then?: 'answer' | 'decline' | 'fail';
}

/** Counts the handler runs that a pipe held back. */
const piped = { runs: 0 };

@Injectable()
class GatedPipe implements PipeTransform {
  async transform(value: unknown) {
    await passGate();
    return value;
  }
}

/** What a `/work` handler does once past its gate: a row of its own, through `manager`, then as `body` says. */
async function afterGate(body: WorkBody | undefined, manager: DataSource['manager'], idempotency: IdempotencyContext) {
  const key = idempotency.run!.scope.key;
  const [{ id }] = await manager.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [key]);
  if (body?.then === 'decline') throw new HttpException({ error: 'card_declined' }, 402);
  if (body?.then === 'fail') throw new Error('the handler failed after its timeout');
  return { id };
}

@Controller('work')
@UseInterceptors(ControllerTimeout)
class WorkController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
  ) {}

  /** Standard mode: waits at its gate, then commits a row of its own and answers with it. */
  @Post('standard')
  @Idempotent()
  async standard(@Body() body: WorkBody, @Req() req: Request) {
    await passGate(req);
    return afterGate(body, this.dataSource.manager, this.idempotency);
  }

  /** A pipe that outlasts the timeout: the handler must then never run, its request's claim being gone. */
  @Post('slow-pipe')
  @Idempotent()
  slowPipe(@Body(GatedPipe) _body: unknown) {
    piped.runs += 1;
    return { ran: true };
  }
}

/** Its transactional route, apart: the Redis store refuses to start with one. */
@Controller('work')
@UseInterceptors(ControllerTimeout)
class TransactionalWorkController {
  constructor(
    private readonly context: PostgresIdempotencyContext,
    private readonly idempotency: IdempotencyContext,
  ) {}

  /** Transactional mode: the same, in the request's transaction. */
  @Post('transactional')
  @Idempotent({ transactional: true })
  async transactional(@Body() body: WorkBody, @Req() req: Request) {
    await passGate(req);
    return afterGate(body, this.context.manager!, this.idempotency);
  }
}

@Controller('own-answer')
@Idempotent({ transactional: true })
class OwnAnswerController {
  constructor(private readonly context: PostgresIdempotencyContext) {}

  /** Writes its own 201 with writeHead and end, then its transaction cannot commit (a deferred constraint). */
  @Post('write-head')
  async writeHead(@Res({ passthrough: true }) res: Response) {
    await this.context.manager!.query('INSERT INTO checked_at_commit (v) VALUES (1), (1)');
    const raw = rawResponseOf(res);
    raw.writeHead(201, 'Charged', { 'content-type': 'application/json' });
    raw.end('{"charged":true}');
  }

  /** Streams its answer, then its transaction cannot commit: the client must not take it for a success. */
  @Post('streamed')
  async streamed(@Res({ passthrough: true }) res: Response) {
    await this.context.manager!.query('INSERT INTO checked_at_commit (v) VALUES (1), (1)');
    const raw = rawResponseOf(res);
    raw.statusCode = 201;
    raw.setHeader('content-type', 'application/json');
    raw.write('{"charged":');
    raw.end('true}');
  }

  /** Loses its connection at its gate, then queries: the query fails with the connection's error. */
  @Post('queries-after-gate')
  async queriesAfterGate(@Req() req: Request) {
    await this.context.manager!.query('INSERT INTO work_log (key) VALUES ($1)', [this.context.run!.key]);
    await passGate(req);
    const [{ id }] = await this.context.manager!.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      this.context.run!.key,
    ]);
    return { id };
  }
}

/** Like `ClassSerializerInterceptor` or the docs' `TransformInterceptor`: drops a secret and wraps the value. */
@Injectable()
class TransformInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    if (!headerOf(context.switchToHttp().getRequest<Request>(), 'x-transform')) return next.handle();
    return next.handle().pipe(map(({ password: _secret, ...user }: { password?: string }) => ({ data: user })));
  }
}

/** Routes whose handlers do what real ones do after a timeout answered for them. */
@Controller('after-timeout')
@UseInterceptors(ControllerTimeout)
@Idempotent({ transactional: true })
class AfterTimeoutController {
  readonly background = { runs: 0 };

  constructor(private readonly context: PostgresIdempotencyContext) {}

  private async write(req: Request) {
    await passGate(req);
    const [{ id }] = await this.context.manager!.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      this.context.run!.key,
    ]);
    return id as number;
  }

  /** A value that cannot be stored: the client never got it, so its writes must not stand. */
  @Post('file')
  async file(@Req() req: Request) {
    await this.write(req);
    return new StreamableFile(Buffer.from('not stored'));
  }

  /** Touches its response after the timeout's answer went out, as handlers setting a header do. */
  @Post('sets-header')
  async setsHeader(@Req() req: Request, @Res({ passthrough: true }) res: Response) {
    const id = await this.write(req);
    res.header('Location', `/charges/${id}`);
    return { id };
  }

  /** An Observable handler over a promise: unsubscribing it would not stop the promise. */
  @Post('observable')
  observable(@Req() req: Request) {
    return from(this.write(req)).pipe(map((id) => ({ id })));
  }

  /** Its value is shaped by an interceptor inside the module's (a serializer). */
  @Post('user')
  async user(@Req() req: Request) {
    const id = await this.write(req);
    return { id, email: 'a@example.com', password: 'hunter2' };
  }

  /** Leaves a task behind that calls another route's method, as application code may. */
  @Post('leaves-a-task')
  async leavesATask(@Req() req: Request) {
    const id = await this.write(req);
    setTimeout(() => void this.countBackground(), 10);
    return { id };
  }

  @Post('count-background')
  async countBackground() {
    this.background.runs += 1;
    return { runs: this.background.runs };
  }

  /** Locks a row, then hangs past maxHoldSeconds: its transaction must not keep the lock from its retry. */
  @Post('hung-with-lock')
  @Idempotent({ transactional: true, maxHoldSeconds: 1 })
  async hungWithLock(@Req() req: Request) {
    await this.context.manager!.query('UPDATE balances SET amount = amount - 1 WHERE id = 1');
    await passGate(req);
    return { key: this.context.run!.key };
  }
}

/** A base class marked as a whole, and a controller that inherits the mark with routes of its own. */
@Idempotent({ transactional: true })
class MarkedBase {
  constructor(protected readonly context: PostgresIdempotencyContext) {}
}

@Controller('inherits-mark')
@UseInterceptors(ControllerTimeout)
class InheritsMarkController extends MarkedBase {
  @Post('own')
  async own(@Req() req: Request) {
    await passGate(req);
    const [{ id }] = await this.context.manager!.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      this.context.run!.key,
    ]);
    return { id };
  }
}

/** Flushes its head at once (long polling), then answers later. */
@Controller('flushes')
@Idempotent()
class FlushesController {
  @Post()
  async flush(@Req() req: Request, @Res() res: Response) {
    const raw = rawResponseOf(res);
    raw.statusCode = 200;
    raw.setHeader('content-type', 'text/plain');
    raw.flushHeaders();
    await passGate(req);
    raw.end('done');
  }
}

const LATE_INVOCATION_REFUSED =
  'ERROR [Idempotency] An idempotent handler was invoked after its request had been answered and its claim ended; it was not run.';

const db = useTestDatabase(
  WORK_LOG,
  'CREATE TABLE balances (id int PRIMARY KEY, amount int NOT NULL)',
  CHECKED_AT_COMMIT,
);
const proxy = useTcpProxy(db);

const rowsOf = (key: string) => workRowsOf(db, key);

/** The controllers of the store's modes: transactional ones on PostgreSQL alone. */
const controllersOn = (store: StandardStore) =>
  store === 'postgres'
    ? [
        WorkController,
        TransactionalWorkController,
        OwnAnswerController,
        AfterTimeoutController,
        InheritsMarkController,
        FlushesController,
      ]
    : [WorkController, FlushesController];

describeOnStores('records on %s', (store) => {
  describe.each(PLATFORMS)('on %s', (platform) => {
    /** What the application of this platform logs. */
    const logger = new RecordingLogger();

    beforeAll(async () => {
      // Each platform's app starts from the same balance (the hung handler's test takes one from it).
      await db.query('INSERT INTO balances VALUES (1, 100) ON CONFLICT (id) DO UPDATE SET amount = 100');
    });
    const server = useTestApp(
      () => ({
        ...recordsOn(store),
        platform,
        database: { url: proxy.urlFor(db.url) },
        pool: { connectionTimeoutMillis: 1000 },
        // A short lease: a claim that is not renewed while its handler runs lapses within the test.
        idempotency: { accountResolver: () => 'acct', leaseSeconds: 0.6, storeTimeoutSeconds: 2, finalizeRetries: 3 },
        controllers: controllersOn(store),
        providers: [GatedPipe],
        logger,
        // Nest places global interceptors after APP_INTERCEPTOR ones: this one runs inside the module's.
        configure: (app) => app.useGlobalInterceptors(new TransformInterceptor(), new GlobalTimeout()),
      }),
      // A failed test may leave a handler at its gate, or the database down: the server cannot close before it answers.
      () => {
        proxy.bringUp();
        gates.releaseAll();
      },
    );

    const records = recordsOf(server, db);
    const recordOf = (key: string) => records.of(key);
    const post = (path: string, key: string, body: object = {}) =>
      request(server.url).post(path).set('Idempotency-Key', key).send(body);

    describe("a timeout interceptor inside the module's (the handler runs on after it answered)", () => {
      const placements = [
        ['on the controller (@UseInterceptors)', 'x-controller-timeout-ms', 504],
        ['app-wide (useGlobalInterceptors)', 'x-global-timeout-ms', 408],
      ] as const;
      const cases = placements.flatMap(([placement, header, status]) =>
        modesOn(store).map((mode) => [placement, mode, header, status] as const),
      );

      it.each(cases)(
        '%s, %s mode: the claim is held and renewed until the handler is done; its outcome, not the timeout, is replayed',
        async (_placement, mode, header, status) => {
          const key = randomUUID();
          const gate = holdNext();
          const timedOut = await post(`/work/${mode}`, key).set(header, '100');
          expect(timedOut.status).toBe(status);
          expect(timedOut.body).toMatchObject({ statusCode: status });
          await gate.reached;

          // The handler still runs: its claim is held (a retry is refused, not run beside it) and renewed past its lease.
          const held = (await recordOf(key))!;
          expect(held).toMatchObject({ status: 'in_progress' });
          await post(`/work/${mode}`, key).expect(409);
          await waitFor(
            async () => ((await recordOf(key))!.leaseUntil! > held.leaseUntil! ? true : undefined),
            'the lease to be renewed',
          );
          await waitFor(
            async () => ((await recordOf(key))!.readAt > held.leaseUntil! ? true : undefined),
            'the first lease to have lapsed',
          );
          await post(`/work/${mode}`, key).expect(409);

          gate.release();
          const replay = await expectReplayOfOneRun(records, key, () => post(`/work/${mode}`, key));
          expect(replay.headers['content-type']).toBe('application/json; charset=utf-8');
          await expect(rowsOf(key)).resolves.toHaveLength(1);
        },
      );

      it.each(modesOn(store))(
        '%s mode: an error the handler throws after the timeout is not stored (no exception filter rendered it): the claim is released',
        async (mode) => {
          const key = randomUUID();
          const gate = holdNext();
          await post(`/work/${mode}`, key, { then: 'decline' }).set('x-controller-timeout-ms', '100').expect(504);
          await gate.reached;
          await post(`/work/${mode}`, key, { then: 'decline' }).expect(409);
          gate.release();
          await waitFor(
            async () => ((await recordOf(key)) === undefined ? true : undefined),
            'the claim to be released',
          );
          // Transactional: the write rolled back. Standard: a write the handler committed before it threw stands.
          await expect(rowsOf(key)).resolves.toHaveLength(mode === 'standard' ? 1 : 0);
          const retry = await post(`/work/${mode}`, key, { then: 'decline' }).expect(402);
          expect(retry.body).toEqual({ error: 'card_declined' });
          expect(retry.headers['idempotent-replay']).toBeUndefined();
        },
      );

      (store === 'postgres' ? it : it.skip)(
        "an unexpected error after the timeout releases the claim once the handler is done, and a retry runs (transactional: PostgreSQL's alone)",
        async () => {
          const key = randomUUID();
          const gate = holdNext();
          await post('/work/transactional', key, { then: 'fail' }).set('x-global-timeout-ms', '100').expect(408);
          await gate.reached;
          await post('/work/transactional', key, { then: 'fail' }).expect(409);
          gate.release();
          await waitFor(
            async () => ((await recordOf(key)) === undefined ? true : undefined),
            'the claim to be released',
          );
          await expect(rowsOf(key)).resolves.toEqual([]);
          const retry = await post('/work/transactional', key).expect(201);
          expect(retry.headers['idempotent-replay']).toBeUndefined();
        },
      );

      it('a handler whose pipe outlasted the timeout never runs: its claim was released with the answer', async () => {
        const key = randomUUID();
        const gate = holdNext();
        const runsBefore = piped.runs;
        await post('/work/slow-pipe', key).set('x-controller-timeout-ms', '100').expect(504);
        await waitFor(async () => ((await recordOf(key)) === undefined ? true : undefined), 'the claim to be released');
        gate.release();
        await waitFor(
          async () => (logger.errors.includes(LATE_INVOCATION_REFUSED) ? true : undefined),
          'the late invocation to be refused',
        );
        expect(piped.runs).toBe(runsBefore);
      });
    });

    describeWith(onPostgresOnly(store, 'transactional mode'), 'never a success for work that did not commit', () => {
      it('a handler that writes its own 201 (writeHead, end) whose commit fails: the client gets 503, not the 201', async () => {
        const key = randomUUID();
        const response = await post('/own-answer/write-head', key).expect(503);
        expect((response as unknown as { res: IncomingMessage }).res.statusMessage).toBe('Service Unavailable');
        await expectRefusedKeepingNothing(db, key, response);
      });

      it('a streamed answer whose commit fails: the connection is cut before the response completes', async () => {
        const key = randomUUID();
        const outcome = await new Promise<string>((resolve) => {
          const client = httpRequest(`${server.url}/own-answer/streamed`, {
            method: 'POST',
            headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
          });
          client.on('error', (error) => resolve(`error: ${error.message}`));
          client.on('response', (response) => {
            let body = '';
            response.on('data', (chunk: Buffer) => (body += chunk.toString()));
            response.on('aborted', () => resolve('aborted'));
            response.on('error', (error) => resolve(`error: ${error.message}`));
            response.on('end', () => resolve(`completed ${response.statusCode}: ${body}`));
          });
          client.end('{}');
        });
        expect(outcome).not.toMatch(/^completed/);
        await expect(db.query('SELECT count(*)::int AS n FROM checked_at_commit')).resolves.toEqual([{ n: 0 }]);
        await waitFor(async () => ((await recordOf(key)) === undefined ? true : undefined), 'the claim to be released');
      });
    });

    describeWith(
      onPostgresOnly(store, 'transactional mode'),
      'a database connection lost under a transactional handler',
      () => {
        it('answers 503 idempotency_store_unavailable with Retry-After, not 500; nothing committed, and the retry runs once', async () => {
          const key = randomUUID();
          const gate = holdNext();
          const answer = post('/own-answer/queries-after-gate', key).then((response) => response);
          await gate.reached;
          proxy.takeDown();
          gate.release();
          const refused = await answer;
          expect(refused.status).toBe(503);
          expect(refused.body).toMatchObject({ error: 'idempotency_store_unavailable' });
          expect(refused.headers['retry-after']).toBe('2');
          proxy.bringUp();
          await expect(rowsOf(key)).resolves.toEqual([]);
          const retry = await waitFor(async () => {
            const response = await post('/own-answer/queries-after-gate', key);
            return response.status === 409 || response.status === 503 ? undefined : response;
          }, 'a retry to run');
          expect(retry.status).toBe(201);
          await expect(rowsOf(key)).resolves.toHaveLength(2);
        });
      },
    );

    describeWith(
      onPostgresOnly(store, 'transactional mode'),
      'handlers that run on after a timeout answered for them (review findings)',
      () => {
        /** Sends a request that a timeout inside the module answers (504) while its handler waits at its gate. */
        async function timedOut(path: string, key: string, headers: Record<string, string> = {}) {
          const gate = holdNext();
          const answer = post(path, key).set({ 'x-controller-timeout-ms': '100', ...headers });
          await expect(answer).resolves.toMatchObject({ status: 504 });
          await gate.reached;
          await post(path, key).set(headers).expect(409);
          gate.release();
        }
        const completed = (key: string) => outcomeStored(records, key);

        it('a value that cannot be stored (a file) is rolled back and released: its retry runs on a clean slate', async () => {
          const key = randomUUID();
          await timedOut('/after-timeout/file', key);
          await waitFor(
            async () => ((await recordOf(key)) === undefined ? true : undefined),
            'the claim to be released',
          );
          await expect(rowsOf(key)).resolves.toEqual([]);
        });

        it('a handler that sets a header after the answer went out still completes, and is replayed', async () => {
          const key = randomUUID();
          await timedOut('/after-timeout/sets-header', key);
          await completed(key);
          const [row] = await rowsOf(key);
          const replay = await post('/after-timeout/sets-header', key).expect(201);
          expect(replay.body).toEqual({ id: row.id });
          await expect(rowsOf(key)).resolves.toHaveLength(1);
        });

        it('an Observable handler over a promise runs to its end: its outcome is stored, not the timeout', async () => {
          const key = randomUUID();
          await timedOut('/after-timeout/observable', key);
          await expectOneRunReplayed(records, key, () => post('/after-timeout/observable', key));
        });

        it('the stored outcome is the value as the interceptors inside the module shape it (no secret leaks)', async () => {
          const key = randomUUID();
          await timedOut('/after-timeout/user', key, { 'x-transform': 'yes' });
          await completed(key);
          const [row] = await rowsOf(key);
          const replay = await post('/after-timeout/user', key).set('x-transform', 'yes').expect(201);
          expect(replay.text).toBe(JSON.stringify({ data: { id: row.id, email: 'a@example.com' } }));
        });

        it('a controller that inherits its mark from a base class: its own routes hold the claim too', async () => {
          const key = randomUUID();
          await timedOut('/inherits-mark/own', key);
          await expectOneRunReplayed(records, key, () => post('/inherits-mark/own', key));
        });

        it("a task the handler leaves behind calls another route's method plainly, outside the request", async () => {
          const key = randomUUID();
          const controller = server.app.get(AfterTimeoutController);
          const before = controller.background.runs;
          const refusals = () => logger.errors.filter((error) => error === LATE_INVOCATION_REFUSED).length;
          const refusalsBefore = refusals();
          await post('/after-timeout/leaves-a-task', key).expect(201);
          await waitFor(
            async () => (controller.background.runs > before ? true : undefined),
            'the background task to run',
          );
          expect(refusals()).toBe(refusalsBefore);
        });

        it('a transactional handler hung past maxHoldSeconds loses its transaction, so its row lock does not block the retry', async () => {
          const key = randomUUID();
          const gate = holdNext();
          const hung = post('/after-timeout/hung-with-lock', key).then((response) => response);
          await gate.reached;
          const retry = await waitFor(async () => {
            const response = await post('/after-timeout/hung-with-lock', key).timeout(5_000);
            return response.status === 409 ? undefined : response;
          }, 'the retry to take the key over');
          expect(retry.status).toBe(201);
          gate.release();
          expect((await hung).status).toBe(409);
          await expect(db.query('SELECT amount FROM balances WHERE id = 1')).resolves.toEqual([{ amount: 99 }]);
        });
      },
    );

    describe('a route that flushes its head (long polling)', () => {
      it('sends the head at once, before its handler is done', async () => {
        const gate = holdNext();
        const client = httpRequest(`${server.url}/flushes`, {
          method: 'POST',
          headers: { 'Idempotency-Key': randomUUID() },
        });
        const response = new Promise<IncomingMessage>((resolve, reject) =>
          client.on('response', resolve).on('error', reject),
        );
        client.end();
        await gate.reached;
        await expect(response).resolves.toMatchObject({ statusCode: 200 });
        gate.release();
        const body = await response.then(
          (message) =>
            new Promise<string>((resolve) => {
              let text = '';
              message.on('data', (chunk: Buffer) => (text += chunk.toString())).on('end', () => resolve(text));
            }),
        );
        expect(body).toBe('done');
      });
    });
  });

  describe("Fastify's handlerTimeout: a timeout outside Nest, answered by Fastify itself", () => {
    const logger = new RecordingLogger();
    /** The gate the next request's accountResolver waits at: the claim is not made yet when Fastify answers. */
    const accountGates = new GateQueue();

    const server = useTestApp(
      () => ({
        ...recordsOn(store),
        platform: 'fastify',
        fastify: { handlerTimeout: 300 },
        database: db,
        idempotency: {
          accountResolver: async () => {
            await accountGates.pass();
            return 'acct';
          },
          leaseSeconds: 0.6,
          storeTimeoutSeconds: 2,
          inFlight: 'wait',
          inFlightWaitSeconds: 3,
        },
        controllers: store === 'postgres' ? [WorkController, TransactionalWorkController] : [WorkController],
        providers: [GatedPipe],
        logger,
      }),
      () => {
        gates.releaseAll();
        accountGates.releaseAll();
      },
    );
    const records = recordsOf(server, db);
    const recordOf = (key: string) => records.of(key);

    // Without a body: on Node 20, Fastify clears its handlerTimeout once a request's body has been read (the request's
    // 'close'), so that it never fires for requests with one.
    const post = (path: string, key: string) => request(server.url).post(path).set('Idempotency-Key', key);

    it.each(modesOn(store))(
      "%s mode: Fastify's 503 goes out while the handler runs; the handler's outcome is stored and replayed",
      async (mode) => {
        const key = randomUUID();
        const gate = holdNext();
        const timedOut = post(`/work/${mode}`, key).then((response) => response);
        await gate.reached;
        const answer = await timedOut;
        expect(answer.status).toBe(503);
        // Fastify's FST_ERR_HANDLER_TIMEOUT, rendered by Nest's exception handler.
        expect(answer.body).toMatchObject({ statusCode: 503, message: expect.stringMatching(/^Request timed out/) });
        await expect(recordOf(key)).resolves.toMatchObject({ status: 'in_progress' });
        gate.release();
        await expectReplayOfOneRun(records, key, () => post(`/work/${mode}`, key));
      },
    );

    it('answered before its claim was made: the handler does not run, and the key is free for the retry', async () => {
      const key = randomUUID();
      const accountGate = accountGates.holdNext();
      const answer = post('/work/standard', key).then((response) => response);
      await accountGate.reached;
      expect((await answer).status).toBe(503);
      accountGate.release();
      // The warning is logged once the claim is made, just before it is released.
      await waitFor(
        async () =>
          logger.warnings.includes(
            "WARN [Idempotency] A request to POST /work/standard was answered outside Nest (a timeout such as Fastify's " +
              'handlerTimeout) while its claim was made: its handler was not run, and the claim was released for its ' +
              'retry. Such a timeout should outlast the claim (storeTimeoutSeconds, and inFlightWaitSeconds with ' +
              'inFlight: wait).',
          ) || undefined,
        'the warning of an answer given outside Nest',
      );
      await waitFor(async () => ((await recordOf(key)) === undefined ? true : undefined), 'the claim to be released');
      await expect(rowsOf(key)).resolves.toEqual([]);
      const retry = await post('/work/standard', key).expect(201);
      expect(retry.headers['idempotent-replay']).toBeUndefined();
      await expect(rowsOf(key)).resolves.toHaveLength(1);
    });

    it("answered while waiting for another attempt's outcome: nothing more is written to it, and nothing fails", async () => {
      const key = randomUUID();
      const gate = holdNext();
      const first = post('/work/standard', key).then((response) => response);
      await gate.reached;
      const waiter = await post('/work/standard', key);
      expect(waiter.status).toBe(503);
      gate.release();
      expect((await first).status).toBe(503);
      await waitFor(async () => ((await recordOf(key))?.status === 'completed' ? true : undefined), 'the outcome');
      await new Promise((resolve) => setTimeout(resolve, 100));
      await expect(post('/work/standard', key).expect(201)).resolves.toMatchObject({
        headers: { 'idempotent-replay': 'true' },
      });
      // Nest's exception handler logs each of Fastify's timeouts; nothing else fails (no write after the answer).
      expect(logger.errors.filter((error) => !error.includes('FST_ERR_HANDLER_TIMEOUT'))).toEqual([]);
    });
  });
});
