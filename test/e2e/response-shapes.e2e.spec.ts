import { randomUUID } from 'node:crypto';
import {
  Controller,
  Delete,
  Header,
  HttpCode,
  HttpException,
  type INestApplication,
  Param,
  Post,
  Put,
  Req,
  Res,
  StreamableFile,
} from '@nestjs/common';
import request from 'supertest';
import { defer, from } from 'rxjs';
import { request as httpRequest } from 'node:http';
import pg from 'pg';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS, type PlatformRequest, type PlatformResponse } from '../support/platforms.js';
import { describeOnStores, onPostgresOnly } from '../support/on-each-store.js';
import { describeWith } from '../support/required-service.js';
import { useTestDatabase } from '../support/test-database.js';
import { Gate } from '../support/gate.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { recordsOf, recordsOn, startTestApp, type TestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

/** Bytes that are not UTF-8: a replay that decoded them as text would change them. */
const BINARY = Buffer.from([0xff, 0xfe, 0x00, 0x80, 0x41]);

/** Every route answers with how many times its handler ran, so a replay shows the first run's number. */
@Controller('shapes')
@Idempotent()
class ShapesController {
  private readonly runs = new Map<string, number>();

  private run(route: string): number {
    const run = (this.runs.get(route) ?? 0) + 1;
    this.runs.set(route, run);
    return run;
  }

  @Post('http-code')
  @HttpCode(200)
  @Header('X-Custom', 'from-decorator')
  httpCode() {
    return { run: this.run('http-code') };
  }

  @Post('passthrough')
  passthrough(@Res({ passthrough: true }) res: PlatformResponse) {
    const run = this.run('passthrough');
    res.status(202);
    res.header('Location', `/things/${run}`);
    res.header('X-Custom', `run ${run}`);
    res.header('X-Not-Stored', `run ${run}`);
    res.header('Set-Cookie', 'session=secret');
    return { run };
  }

  @Post('binary')
  binary(@Res({ passthrough: true }) res: PlatformResponse) {
    this.run('binary');
    res.type('application/octet-stream').send(BINARY);
  }

  @Post('thrown')
  thrown() {
    throw new HttpException({ reason: 'gone', run: this.run('thrown') }, 410);
  }

  @Put('text')
  text() {
    return `plain text, run ${this.run('text')}`;
  }

  @Post('empty')
  @HttpCode(204)
  empty() {
    this.run('empty');
  }

  @Post('not-modified')
  @HttpCode(304)
  notModified() {
    this.run('not-modified');
  }

  @Post('stream')
  stream() {
    return new StreamableFile(Buffer.from(`streamed, run ${this.run('stream')}`));
  }

  @Post('own-response')
  ownResponse(@Res() res: PlatformResponse) {
    res.status(200).send({ run: this.run('own-response') });
  }

  @Post('large')
  large() {
    return { run: this.run('large'), padding: 'x'.repeat(2000) };
  }

  /** Asks the client to try again (408, 425, 429) on its first run, then creates. */
  @Post('try-again/:status')
  tryAgain(@Param('status') status: string) {
    const run = this.run(`try-again ${status}`);
    if (run === 1) throw new HttpException({ reason: 'try again', run }, Number(status));
    return { run };
  }

  /** Asks the client to try again, on a route whose own rule keeps that answer as its outcome. */
  @Post('kept-try-again')
  @Idempotent({ isFinalStatus: (status) => status < 500 })
  keptTryAgain() {
    throw new HttpException({ reason: 'try again', run: this.run('kept-try-again') }, 429);
  }

  @Post('crash')
  crash() {
    throw new Error(`unexpected failure, run ${this.run('crash')}`);
  }

  @Post('count')
  count() {
    return { run: this.run('count') };
  }

  @Delete('count')
  remove() {
    return { run: this.run('count') };
  }

  runsOf(route: string): number {
    return this.runs.get(route) ?? 0;
  }
}

let gate = new Gate();

/** Replaces the method with a wrapper, as tracing or logging decorators do: the wrapper's name differs. */
function Wrapped(): MethodDecorator {
  return (_target, _key, descriptor: PropertyDescriptor) => {
    const original = descriptor.value as (...args: unknown[]) => unknown;
    descriptor.value = function wrapper(this: unknown, ...args: unknown[]) {
      return original.apply(this, args);
    };
  };
}

@Controller('late')
@Idempotent()
class LateController {
  runs = 0;

  @Post('observable')
  observable(@Req() request: PlatformRequest) {
    return defer(() => from(gate.pass(request).then(() => ({ run: (this.runs += 1) }))));
  }

  @Post('promise')
  async promise(@Req() request: PlatformRequest) {
    await gate.pass(request);
    return { run: (this.runs += 1) };
  }

  @Post('late-error')
  lateError(@Res({ passthrough: true }) res: PlatformResponse) {
    res.status(201).send({ run: (this.runs += 1) });
    throw new Error('thrown after the response was written');
  }

  @Post('wrapped-own-response')
  @Wrapped()
  wrappedOwnResponse(@Res() res: PlatformResponse) {
    res.status(200).send({ run: (this.runs += 1) });
  }
}

class BaseController {
  runs = 0;

  @Post()
  create() {
    return { run: (this.runs += 1) };
  }
}

@Controller('inherited-idempotent')
@Idempotent()
class IdempotentChild extends BaseController {}

@Controller('inherited-plain')
class PlainChild extends BaseController {}

const db = useTestDatabase();

afterAll(() => {
  gate.release(); // a failed test may leave a handler waiting at it
});

describeOnStores('records on %s', (store) => {
  describe.each(PLATFORMS)('on %s', (platform) => {
    /** What the application of this platform logs (the module logs some things once per application). */
    const logger = new RecordingLogger();
    let started: TestApp;
    let app: INestApplication;
    let url: string;
    let controller: ShapesController;

    beforeAll(async () => {
      ({ app, url } = started = await startTestApp({
        ...recordsOn(store),
        platform,
        database: db,
        idempotency: {
          singleTenant: true,
          headerName: 'X-Idempotency-Key',
          replayHeaderName: 'Idempotent-Replayed',
          storedResponseHeaders: ['X-Custom', 'Set-Cookie'],
          maxStoredBodyBytes: 1024,
          storeTimeoutSeconds: 1,
        },
        controllers: [ShapesController, LateController, IdempotentChild, PlainChild],
        logger,
      }));
      controller = app.get(ShapesController);
    });

    afterAll(async () => {
      gate.release(); // a failed test may leave a handler waiting at it
      await app?.close();
    });

    const send = (method: 'post' | 'put' | 'delete', path: string, key: string) =>
      request(url)[method](`/shapes/${path}`).set('X-Idempotency-Key', key).send({ n: 1 });
    const records = recordsOf(() => started, db);
    const released = async (key: string) => (await records.of(key)) === undefined;

    describe('responses that are stored and replayed exactly', () => {
      it('@HttpCode and @Header: the status and the headers replay', async () => {
        const key = randomUUID();
        const first = await send('post', 'http-code', key).expect(200);
        expect(first.headers['x-custom']).toBe('from-decorator');
        expect(first.headers['idempotent-replayed']).toBeUndefined();
        const replay = await send('post', 'http-code', key).expect(200);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.headers['x-custom']).toBe('from-decorator');
        expect(replay.text).toBe(first.text);
        expect(controller.runsOf('http-code')).toBe(1);
      });

      it('passthrough res.status and res.setHeader: status, Location and allow-listed headers replay; others and Set-Cookie never do', async () => {
        const key = randomUUID();
        const first = await send('post', 'passthrough', key).expect(202);
        expect(first.headers['set-cookie']).toEqual(['session=secret']);
        expect(first.headers['x-not-stored']).toBe('run 1');
        const replay = await send('post', 'passthrough', key).expect(202);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.headers.location).toBe('/things/1');
        expect(replay.headers['x-custom']).toBe('run 1');
        expect(replay.headers['x-not-stored']).toBeUndefined();
        expect(replay.headers['set-cookie']).toBeUndefined();
        expect(replay.text).toBe(first.text);
        expect(controller.runsOf('passthrough')).toBe(1);
      });

      it("a route's own isFinalStatus decides: a 429 it keeps is stored and replayed, never run again", async () => {
        const key = randomUUID();
        const first = await send('post', 'kept-try-again', key).expect(429);
        const replay = await send('post', 'kept-try-again', key).expect(429);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.body).toEqual(first.body);
        expect(controller.runsOf('kept-try-again')).toBe(1);
      });

      it('a thrown HttpException (410) is a final outcome: replayed with its body', async () => {
        const key = randomUUID();
        const first = await send('post', 'thrown', key).expect(410);
        expect(first.body).toEqual({ reason: 'gone', run: 1 });
        const replay = await send('post', 'thrown', key).expect(410);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.text).toBe(first.text);
      });

      it('a text body from PUT replays with its content type', async () => {
        const key = randomUUID();
        const first = await send('put', 'text', key).expect(200);
        const replay = await send('put', 'text', key).expect(200);
        expect(replay.text).toBe('plain text, run 1');
        expect(replay.text).toBe(first.text);
        expect(replay.headers['content-type']).toBe(first.headers['content-type']);
      });

      it('a binary body that is not UTF-8 replays byte for byte, with its content type', async () => {
        const key = randomUUID();
        const bytes = (test: request.Test) =>
          test.buffer(true).parse((res, done) => {
            const chunks: Buffer[] = [];
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('end', () => done(null, Buffer.concat(chunks)));
          });
        const first = await bytes(send('post', 'binary', key)).expect(201);
        expect(first.body).toEqual(BINARY);
        const replay = await bytes(send('post', 'binary', key)).expect(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.body).toEqual(BINARY);
        expect(replay.headers['content-type']).toBe(first.headers['content-type']);
        expect(controller.runsOf('binary')).toBe(1);
      });

      // RFC 9110 forbids Content-Length on a 204; neither platform sends one on a 204 or a 304, and neither does a replay.
      it.each([
        ['204', 'empty', 204],
        ['304', 'not-modified', 304],
      ])('a %s replays as it was first sent: empty, without Content-Length', async (_status, route, status) => {
        const key = randomUUID();
        const first = await send('post', route, key).expect(status);
        expect(first.headers['content-length']).toBeUndefined();
        const replay = await send('post', route, key).expect(status);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.headers['content-length']).toBeUndefined();
        expect(replay.headers['transfer-encoding']).toBeUndefined();
        expect(replay.headers['content-type']).toBe(first.headers['content-type']);
        expect(replay.text).toBe('');
        expect(controller.runsOf(route)).toBe(1);
      });
    });

    describe('responses that are not stored: the claim is released and a retry runs again', () => {
      it.each([
        ['a StreamableFile', 'stream', 201],
        ['a response written through @Res() without passthrough', 'own-response', 200],
        ['a body over maxStoredBodyBytes', 'large', 201],
      ])('%s', async (_case, route, status) => {
        const key = randomUUID();
        await send('post', route, key).expect(status);
        // A stream's bytes (its length told in Content-Length) may reach the client before its end, which is held
        // until the claim is released.
        await waitFor(async () => (await released(key)) || undefined, 'the claim to be released');
        const retry = await send('post', route, key);
        expect(retry.headers['idempotent-replayed']).toBeUndefined();
        expect(controller.runsOf(route)).toBe(2);
        await send('post', route, randomUUID());
        const warnings = logger.warnings.filter((warning) => warning.includes(`POST /shapes/${route}`));
        expect(warnings).toHaveLength(1);
      });

      it.each([408, 425, 429])(
        'a %i (try again) releases the claim: the retry with the same key runs and gets 201',
        async (status) => {
          const key = randomUUID();
          await send('post', `try-again/${status}`, key).expect(status);
          expect(await released(key)).toBe(true);
          const retry = await send('post', `try-again/${status}`, key).expect(201);
          expect(retry.headers['idempotent-replayed']).toBeUndefined();
          expect(retry.body).toEqual({ run: 2 });
        },
      );

      it('an unexpected error (500) releases the claim', async () => {
        const key = randomUUID();
        await send('post', 'crash', key).expect(500);
        expect(await released(key)).toBe(true);
        await send('post', 'crash', key).expect(500);
        expect(controller.runsOf('crash')).toBe(2);
      });
    });

    describe('module options', () => {
      it('reads the key from the configured header only', async () => {
        const response = await request(url)
          .post('/shapes/count')
          .set('Idempotency-Key', randomUUID())
          .send({})
          .expect(400);
        expect(response.body).toMatchObject({
          error: 'idempotency_key_required',
          message: expect.stringContaining('X-Idempotency-Key'),
        });
      });

      it('names the configured header in its refusals', async () => {
        const key = randomUUID();
        await request(url).post('/shapes/count').set('X-Idempotency-Key', key).send({ n: 1 }).expect(201);
        const reuse = await request(url).post('/shapes/count').set('X-Idempotency-Key', key).send({ n: 2 }).expect(422);
        expect(reuse.body.message).toBe(
          'This X-Idempotency-Key was already used with a different request (method, path, query or body). ' +
            'Use a new key for a new operation.',
        );
      });

      it('lets DELETE through untouched even with a key', async () => {
        const key = randomUUID();
        const before = controller.runsOf('count');
        await send('delete', 'count', key).expect(200);
        await send('delete', 'count', key).expect(200);
        expect(controller.runsOf('count')).toBe(before + 2);
        expect(await released(key)).toBe(true);
      });
    });

    describe('a client that leaves before the handler is done', () => {
      it.each(['observable', 'promise'])(
        'still gets its outcome stored from a handler returning an %s; the retry replays it',
        async (route) => {
          gate = new Gate();
          const key = randomUUID();
          const runsBefore = app.get(LateController).runs;
          const client = httpRequest(`${url}/late/${route}`, {
            method: 'POST',
            headers: { 'X-Idempotency-Key': key, 'Content-Type': 'application/json' },
          });
          client.on('error', () => undefined);
          client.end('{}');
          await gate.reached;
          client.destroy();
          await gate.clientGone;
          gate.release();
          const record = await waitFor(async () => {
            const read = await records.of(key);
            return read?.status === 'completed' ? read : undefined;
          }, 'the outcome to be stored');
          expect(record.responseStatus).toBe(201);
          const replay = await request(url).post(`/late/${route}`).set('X-Idempotency-Key', key).send({}).expect(201);
          expect(replay.headers['idempotent-replayed']).toBe('true');
          expect(replay.body).toEqual({ run: runsBefore + 1 });
          expect(app.get(LateController).runs).toBe(runsBefore + 1);
        },
      );
    });

    describe('routes that fool a naive capture', () => {
      it('a response written before a late exception is the outcome, as the client saw it', async () => {
        const key = randomUUID();
        const first = await request(url).post('/late/late-error').set('X-Idempotency-Key', key).send({}).expect(201);
        const replay = await request(url).post('/late/late-error').set('X-Idempotency-Key', key).send({}).expect(201);
        expect(replay.text).toBe(first.text);
      });

      it('a @Res() route behind a method-replacing decorator is not stored, and its retry is answered', async () => {
        const key = randomUUID();
        const runsBefore = app.get(LateController).runs;
        await request(url).post('/late/wrapped-own-response').set('X-Idempotency-Key', key).send({}).expect(200);
        const retry = await request(url)
          .post('/late/wrapped-own-response')
          .set('X-Idempotency-Key', key)
          .send({})
          .timeout(5_000)
          .expect(200);
        expect(retry.body).toEqual({ run: runsBefore + 2 });
      });

      it('a handler inherited by a marked and an unmarked controller is idempotent on the marked one only', async () => {
        await request(url).post('/inherited-plain').send({}).expect(201);
        await request(url).post('/inherited-idempotent').send({}).expect(400);
        const key = randomUUID();
        const first = await request(url)
          .post('/inherited-idempotent')
          .set('X-Idempotency-Key', key)
          .send({})
          .expect(201);
        const replay = await request(url)
          .post('/inherited-idempotent')
          .set('X-Idempotency-Key', key)
          .send({})
          .expect(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.text).toBe(first.text);
      });
    });

    describeWith(
      onPostgresOnly(store, 'a lock on its records table keeps it from answering'),
      'a store that does not answer in time (storeTimeoutSeconds)',
      () => {
        let locker: pg.Client;

        beforeEach(async () => {
          locker = new pg.Client({ connectionString: db.url });
          await locker.connect();
        });

        afterEach(async () => {
          await locker.query('ROLLBACK');
          await locker.end();
        });

        it('refuses the request with 503 and Retry-After when the claim cannot be made, never running the handler', async () => {
          const before = controller.runsOf('count');
          await locker.query('BEGIN');
          await locker.query('LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE');
          const key = randomUUID();
          const response = await request(url).post('/shapes/count').set('X-Idempotency-Key', key).send({}).expect(503);
          expect(response.headers['retry-after']).toBe('2');
          expect(response.body.error).toBe('idempotency_store_unavailable');
          expect(controller.runsOf('count')).toBe(before);
          expect(logger.errors).toContain(
            `ERROR [Idempotency] Claiming key "${key}" of POST /shapes/count failed (the store is unavailable): ` +
              'Error: claim took longer than storeTimeoutSeconds (1 s)',
          );
          // The refused claim lands once the table is free again, and is given back at once.
          await locker.query('ROLLBACK');
          await locker.query('BEGIN');
          const lateClaimSettled = async () => {
            // Until the claim's statement has returned, its insert may be waiting or committing (not yet visible).
            const waiting = await db.query(
              `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE '%claimed AS (%' AND pid <> pg_backend_pid()`,
            );
            return waiting.length === 0 && (await released(key)) ? true : undefined;
          };
          await waitFor(lateClaimSettled, 'the late claim to land and be released');
          // A claim the batch gave up on (its lock timeout) is sent again from the application, where the statement
          // check above cannot see it: a retry that meets it in flight is answered 409, and the next one once it is
          // given back. Kept (not released), the key would answer 409 for its whole lease, past this bound.
          await waitFor(async () => {
            const retry = await request(url).post('/shapes/count').set('X-Idempotency-Key', key).send({});
            if (retry.status === 409) return undefined;
            expect(retry.status).toBe(201);
            return true;
          }, 'a retry to run once the late claim is given back');
        });

        it('lets the response go when the outcome cannot be stored in time', async () => {
          gate = new Gate();
          const key = randomUUID();
          const answered = request(url)
            .post('/late/promise')
            .set('X-Idempotency-Key', key)
            .send({})
            .then((response) => response);
          await gate.reached;
          await locker.query('BEGIN');
          await locker.query('LOCK TABLE idempotency_records IN EXCLUSIVE MODE');
          gate.release();
          const response = await answered;
          expect(response.status).toBe(201);
          expect(logger.warnings).toContain(
            `WARN [Idempotency] Finalizing key "${key}" of POST /late/promise failed ` +
              '(Error: storing the outcome took longer than storeTimeoutSeconds (1 s)); retrying in the background.',
          );
        });
      },
    );
  });
});
