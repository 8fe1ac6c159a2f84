import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import {
  type ArgumentsHost,
  type CallHandler,
  Catch,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  HttpException,
  Injectable,
  type NestInterceptor,
  Post,
  Req,
  RequestTimeoutException,
  Res,
  UseFilters,
} from '@nestjs/common';
import { APP_INTERCEPTOR, HttpAdapterHost } from '@nestjs/core';
import { InjectDataSource } from '@nestjs/typeorm';
import {
  catchError,
  concat,
  from,
  interval,
  map,
  mergeMap,
  of,
  take,
  throwError,
  timeout,
  TimeoutError,
  timer,
} from 'rxjs';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { Gate, GateQueue } from '../support/gate.js';
import {
  headerOf,
  PLATFORMS,
  type PlatformRequest as Request,
  type PlatformResponse as Response,
} from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { useTestDatabase } from '../support/test-database.js';
import { describeOnStores } from '../support/on-each-store.js';
import { modesOn, recordsOf, recordsOn, useTestApp } from '../support/test-app.js';
import { expectOneRunReplayed, outcomeStored, WORK_LOG, workRowsOf } from '../support/work-log.js';

/**
 * Interceptors on either side of the module's, each armed by a request header: timeouts that answer with an error
 * or with a fallback value, slow work after the handler, and a `{ data }` wrapper outside.
 */
const gates = new GateQueue();

function armedBy(header: string, arm: (next: CallHandler, value: string) => ReturnType<CallHandler['handle']>) {
  @Injectable()
  class Armed implements NestInterceptor {
    intercept(context: ExecutionContext, next: CallHandler) {
      const value = headerOf(context.switchToHttp().getRequest<Request>(), header);
      return value ? arm(next, value) : next.handle();
    }
  }
  return Armed;
}

const timingOut = (next: CallHandler, ms: string) =>
  next.handle().pipe(
    timeout(Number(ms)),
    catchError((error: unknown) =>
      throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
    ),
  );
const InnerTimeout = armedBy('x-timeout-ms', timingOut);
const OuterTimeout = armedBy('x-outer-timeout-ms', timingOut);
/** A timeout that answers "still processing" with a fallback value instead of an error. */
const FallbackTimeout = armedBy('x-fallback-ms', (next, ms) =>
  next.handle().pipe(timeout({ first: Number(ms), with: () => of({ pending: true }) })),
);
/** Slow work after the handler (an audit write, an enrichment call): the first pass waits at a gate of its own. */
const afterGate = { current: undefined as Gate | undefined };
const passAfterGate = () => {
  const gate = afterGate.current;
  afterGate.current = undefined;
  return gate?.pass() ?? Promise.resolve();
};
const SlowAfter = armedBy('x-slow-after', (next) =>
  next.handle().pipe(mergeMap((value) => from(passAfterGate().then(() => value)))),
);
/** Turns a declined value into a 402, as a `NotFoundInterceptor` turns `null` into a 404. */
const DeclineToError = armedBy('x-decline', (next) =>
  next.handle().pipe(
    map((value: { declined?: boolean }) => {
      if (value.declined) throw new HttpException({ error: 'card_declined' }, 402);
      return value;
    }),
  ),
);
/** Inside the module's: takes only the first value of an Observable handler. */
const FirstValue = armedBy('x-first-value', (next) => next.handle().pipe(take(1)));
/** Outside the module's: refuses a missing value, as interceptors that read it may. */
const RequireValue = armedBy('x-require-value', (next) =>
  next.handle().pipe(
    map((value: unknown) => {
      if (value === undefined) throw new Error('no value');
      return value;
    }),
  ),
);
/** Outside the module's: wraps every value as `{ data }`, like the docs' `TransformInterceptor`. */
const OuterWrap = armedBy('x-wrap', (next) => next.handle().pipe(map((data: unknown) => ({ data }))));

@Catch(HttpException)
class DocsExceptionFilter implements ExceptionFilter {
  catch(exception: HttpException, host: ArgumentsHost) {
    const status = exception.getStatus();
    host.switchToHttp().getResponse<Response>().status(status).send({ statusCode: status, path: 'filtered' });
  }
}

/** The row of a run (of the key the handler runs for), written through `manager`. */
async function insertRun(manager: DataSource['manager'], idempotency: IdempotencyContext) {
  const [{ id }] = await manager.query('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
    idempotency.run!.scope.key,
  ]);
  return { id: id as number };
}

@Controller('order')
class OrderController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
    private readonly adapterHost: HttpAdapterHost,
  ) {}

  @Post('standard')
  @Idempotent()
  async standard(@Req() req: Request) {
    await gates.pass(req);
    return this.insert(this.dataSource.manager);
  }

  /** Takes its response, but lets Nest send its value. */
  @Post('passthrough')
  @Idempotent()
  async passthrough(@Req() req: Request, @Res({ passthrough: true }) res: Response) {
    await gates.pass(req);
    const value = await this.insert(this.dataSource.manager);
    res.header('x-charge-id', String(value.id));
    return value;
  }

  @Post('declined')
  @Idempotent()
  async declined() {
    const { id } = await this.insert(this.dataSource.manager);
    return { id, declined: true };
  }

  /** Answers from an event listener, outside its own async context, as handlers wrapping callback APIs do. */
  @Post('answers-from-listener')
  @Idempotent()
  async answersFromListener(@Res({ passthrough: true }) res: Response) {
    const { id } = await this.insert(this.dataSource.manager);
    await new Promise<void>((resolve) =>
      ticker.once('tick', () => {
        res.status(200).send({ charged: id });
        resolve();
      }),
    );
  }

  /** An endless Observable whose first value is the answer. */
  @Post('ticks')
  @Idempotent()
  ticks() {
    return interval(10).pipe(
      map((tick) => ({ tick, calls: (ticking.calls += tick === 0 ? 1 : 0), emitted: (ticking.emitted += 1) })),
    );
  }

  /** Errors are answered by a filter written as Nest's docs show it (`response.status().json()`, not Nest's reply). */
  @Post('own-filter')
  @Idempotent()
  @UseFilters(DocsExceptionFilter)
  async ownFilter(@Req() req: Request) {
    await gates.pass(req);
    return this.insert(this.dataSource.manager);
  }

  /** Answers through the platform adapter itself, as some libraries do. */
  @Post('answers-through-adapter')
  @Idempotent()
  async answersThroughAdapter(@Res({ passthrough: true }) res: Response) {
    const { id } = await this.insert(this.dataSource.manager);
    this.adapterHost.httpAdapter.reply(res, { charged: id }, 200);
  }

  /** Gives a first value at once, then does its work and gives its last value: Nest sends the last one. */
  @Post('stages')
  @Idempotent()
  stages() {
    return concat(
      of({ stage: 'accepted' }),
      timer(50).pipe(
        mergeMap(() => from(this.insert(this.dataSource.manager)).pipe(map(({ id }) => ({ stage: 'done', id })))),
      ),
    );
  }

  private insert(manager: DataSource['manager']) {
    return insertRun(manager, this.idempotency);
  }
}

/** Its transactional route, apart: the Redis store refuses to start with one. */
@Controller('order')
class TransactionalOrderController {
  constructor(
    private readonly context: PostgresIdempotencyContext,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Post('transactional')
  @Idempotent({ transactional: true })
  async transactional(@Req() req: Request) {
    await gates.pass(req);
    return insertRun(this.context.manager!, this.idempotency);
  }
}

const ticking = { calls: 0, emitted: 0 };
/** Events from outside any request (a message bus, a driver's callbacks): listeners run in its async context. */
const ticker = new EventEmitter();
const ticks = setInterval(() => ticker.emit('tick'), 5);

const db = useTestDatabase(WORK_LOG);

afterAll(() => {
  clearInterval(ticks);
  gates.releaseAll();
  afterGate.current?.release();
});

describeOnStores('records on %s', (store) => {
  describe.each(PLATFORMS)('on %s', (platform) => {
    /** What the application of this platform logs. */
    const logger = new RecordingLogger();
    const server = useTestApp(
      () => ({
        ...recordsOn(store),
        platform,
        database: db,
        idempotency: { singleTenant: true, leaseSeconds: 1, storeTimeoutSeconds: 2 },
        controllers: store === 'postgres' ? [OrderController, TransactionalOrderController] : [OrderController],
        // Registered in the root module, these run outside the module's interceptor.
        providers: [
          { provide: APP_INTERCEPTOR, useClass: OuterWrap },
          { provide: APP_INTERCEPTOR, useClass: OuterTimeout },
          { provide: APP_INTERCEPTOR, useClass: RequireValue },
        ],
        logger,
        configure: (app) =>
          app.useGlobalInterceptors(
            new InnerTimeout(),
            new FallbackTimeout(),
            new SlowAfter(),
            new DeclineToError(),
            new FirstValue(),
          ),
      }),
      // A failed test may leave a handler waiting at its gate; the server cannot close before it answers.
      () => {
        gates.releaseAll();
        afterGate.current?.release();
      },
    );

    const records = recordsOf(server, db);
    const rowsOf = (key: string) => workRowsOf(records, key);
    const completed = (key: string) => outcomeStored(records, key);
    const post = (path: string, key: string) => request(server.url).post(path).set('Idempotency-Key', key).send({});
    /** Once the outcome of `key` is stored, a retry of `path` replays the one run's row. */
    const expectReplayed = (path: string, key: string, body?: object) =>
      expectOneRunReplayed(records, key, () => post(path, key), body);

    describe.each(modesOn(store))('%s mode', (mode) => {
      it("a timeout that answers with a fallback value: the handler's own value is stored, not the fallback", async () => {
        const key = randomUUID();
        const gate = gates.holdNext();
        const first = await post(`/order/${mode}`, key).set('x-fallback-ms', '100');
        expect(first.body).toEqual({ pending: true });
        await gate.reached;
        gate.release();
        await completed(key);
        const rows = await rowsOf(key);
        expect(rows).toHaveLength(1);
        await expect(post(`/order/${mode}`, key).expect(201)).resolves.toMatchObject({ body: { id: rows[0].id } });
      });

      it("a replay through a value-mapping interceptor outside the module's is the stored bytes, not mapped again", async () => {
        const key = randomUUID();
        const first = await post(`/order/${mode}`, key).set('x-wrap', 'yes').expect(201);
        expect(first.body).toEqual({ data: { id: expect.any(Number) } });
        const replay = await post(`/order/${mode}`, key).set('x-wrap', 'yes').expect(201);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(first.text);
      });
    });

    describe.each(modesOn(store))('slow work after the handler, inside a timeout, %s mode', (mode) => {
      it('the timeout is not the outcome of a handler that gave its value: the value, as the inner pipeline shapes it, is stored', async () => {
        const key = randomUUID();
        afterGate.current = new Gate();
        const reached = afterGate.current.reached;
        await post(`/order/${mode}`, key).set({ 'x-slow-after': 'yes', 'x-timeout-ms': '100' }).expect(408);
        await reached;
        await expectReplayed(`/order/${mode}`, key);
      });
    });

    describe('answers that are the outcome', () => {
      it("an interceptor inside that turns the handler's value into an error (402): that error is stored and replayed", async () => {
        const key = randomUUID();
        const first = await post('/order/declined', key).set('x-decline', 'yes').expect(402);
        expect(first.body).toEqual({ error: 'card_declined' });
        const replay = await post('/order/declined', key).set('x-decline', 'yes').expect(402);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(first.text);
      });

      it('a passthrough handler that answers from an event listener: its own answer is stored', async () => {
        const key = randomUUID();
        const first = await post('/order/answers-from-listener', key).expect(200);
        await completed(key);
        const replay = await post('/order/answers-from-listener', key).expect(200);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(first.text);
      });

      it('an endless Observable handler whose first value an interceptor takes: that value is stored and the Observable stops', async () => {
        const key = randomUUID();
        const callsBefore = ticking.calls;
        const first = await post('/order/ticks', key).set('x-first-value', 'yes').expect(201);
        expect(first.body).toMatchObject({ tick: 0 });
        await completed(key);
        const emitted = ticking.emitted;
        const replay = await post('/order/ticks', key).set('x-first-value', 'yes').expect(201);
        expect(replay.text).toBe(first.text);
        expect(ticking.calls).toBe(callsBefore + 1);
        // Another tick would have been emitted in 10 ms; none is, long after.
        await new Promise((resolve) => setTimeout(resolve, 100));
        expect(ticking.emitted).toBe(emitted);
      });

      it("a replay gives interceptors outside the module's its body as their value: none of them fails on it", async () => {
        const key = randomUUID();
        const errorsBefore = logger.errors.length;
        const first = await post('/order/standard', key).set('x-require-value', 'yes').expect(201);
        const replay = await post('/order/standard', key).set('x-require-value', 'yes').expect(201);
        expect(replay.text).toBe(first.text);
        expect(logger.errors.slice(errorsBefore)).toEqual([]);
      });
    });

    describe("answers that are not the handler's", () => {
      it("a timeout answered by an exception filter of the docs' kind goes out at once; the handler's value is stored", async () => {
        const key = randomUUID();
        const gate = gates.holdNext();
        const timedOut = await post('/order/own-filter', key).set('x-timeout-ms', '100').expect(408);
        expect(timedOut.body).toEqual({ statusCode: 408, path: 'filtered' });
        await gate.reached;
        await post('/order/own-filter', key).expect(409);
        gate.release();
        await expectReplayed('/order/own-filter', key);
      });

      it('a handler that answers through the platform adapter itself: its answer is stored', async () => {
        const key = randomUUID();
        const first = await post('/order/answers-through-adapter', key).expect(200);
        const replay = await post('/order/answers-through-adapter', key).expect(200);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.text).toBe(first.text);
      });

      it('an Observable handler timed out after its first value: its last value, once its work is done, is stored', async () => {
        const key = randomUUID();
        await post('/order/stages', key).set('x-timeout-ms', '20').expect(408);
        await expectReplayed('/order/stages', key, { stage: 'done' });
      });
    });

    describe.each([
      ['inside', 'x-timeout-ms'],
      ['outside', 'x-outer-timeout-ms'],
    ])("a passthrough route with a timeout %s the module's", (_where, header) => {
      it('answers the timeout at once and never runs the handler twice', async () => {
        const key = randomUUID();
        const gate = gates.holdNext();
        await post('/order/passthrough', key).set(header, '100').expect(408);
        await gate.reached;
        await post('/order/passthrough', key).expect(409);
        gate.release();
        await expectReplayed('/order/passthrough', key);
      });
    });
  });
});
