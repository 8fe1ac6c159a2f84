import { randomUUID } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import fastifyCompress from '@fastify/compress';
import { Controller, Post, Req, Res } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import compression from 'compression';
import { type IdempotencyModuleOptions, Idempotent } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { GateQueue } from '../support/gate.js';
import { postOnTheWire, type WireResponse } from '../support/on-the-wire.js';
import { type Platform, PLATFORMS, type PlatformRequest, type PlatformResponse } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { describeOnStores } from '../support/on-each-store.js';
import {
  type RedisRecords,
  recordsOf,
  recordsOn,
  type StandardStore,
  startTestApp,
  type TestAppOptions,
  type TestModuleOptions,
  useTestApp,
} from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';
import { CHECKED_AT_COMMIT } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

// Issue 17: responses that a compression plugin or middleware compressed, replayed to clients that accept their
// coding and to clients that do not. `@fastify/compress` compresses a body between its threshold (1 KiB) and its
// sync threshold (4 to 64 KiB, by the host's cores) into one buffer, which the module stores as it was sent; a larger
// one goes out as a stream, which it does not store. Express's `compression` compresses below the module.

/** Over the compression threshold (1 KiB), under `@fastify/compress`'s smallest sync threshold (4 KiB). */
const COMPRESSED_PADDING = 'x'.repeat(2000);
/** Over `@fastify/compress`'s largest sync threshold (64 KiB): compressed as a stream. */
const STREAMED_PADDING = 'x'.repeat(100_000);

const gates = new GateQueue();

@Controller('compressed')
@Idempotent()
class CompressedController {
  private readonly runs = new Map<string, number>();

  private run(route: string): number {
    const run = (this.runs.get(route) ?? 0) + 1;
    this.runs.set(route, run);
    return run;
  }

  runsOf(route: string): number {
    return this.runs.get(route) ?? 0;
  }

  @Post()
  create() {
    return { run: this.run('create'), padding: COMPRESSED_PADDING };
  }

  @Post('awaited')
  @Idempotent({ inFlight: 'wait' })
  async awaited(@Req() request: PlatformRequest) {
    await gates.pass(request);
    return { run: this.run('awaited'), padding: COMPRESSED_PADDING };
  }

  @Post('streamed')
  streamed() {
    return { run: this.run('streamed'), padding: STREAMED_PADDING };
  }

  /** A body in a coding of the application's own, which no compression plugin touches and the module cannot decode. */
  @Post('custom-coding')
  customCoding(@Res({ passthrough: true }) res: PlatformResponse) {
    res.header('Content-Encoding', 'x-custom');
    return { run: this.run('custom-coding'), padding: COMPRESSED_PADDING };
  }
}

/** A transactional route, of its own controller: the Redis store refuses to start with one. */
@Controller('compressed')
class FailingAtCommitController {
  constructor(private readonly context: PostgresIdempotencyContext) {}

  /** Breaks a constraint checked only at commit: the module answers 503 instead of the compressed answer. */
  @Post('fails-at-commit')
  @Idempotent({ transactional: true })
  async failsAtCommit() {
    await this.context.manager!.query('INSERT INTO checked_at_commit (v) VALUES (1), (1)');
    return { padding: COMPRESSED_PADDING };
  }
}

const db = useTestDatabase(CHECKED_AT_COMMIT);

afterAll(() => {
  gates.releaseAll(); // a failed test may leave a handler waiting at its gate
});

/**
 * The app with the platform's compression at its defaults (`@fastify/compress` on Fastify, `compression` on Express),
 * its records on `store` (on Redis, another app's with `redis`).
 */
function appOn(
  store: StandardStore,
  platform: Platform,
  options: Partial<IdempotencyModuleOptions>,
  logger: RecordingLogger,
  redis?: RedisRecords,
): TestModuleOptions & TestAppOptions {
  return {
    ...recordsOn(store, redis),
    platform,
    database: db,
    idempotency: { singleTenant: true, ...options },
    controllers: store === 'postgres' ? [CompressedController, FailingAtCommitController] : [CompressedController],
    logger,
    // The plugin is registered before the application starts, as an application does in its main.ts.
    configure: (app) => {
      if (platform === 'fastify')
        return (app as NestFastifyApplication).register(fastifyCompress).then(() => undefined);
      else app.use(compression());
    },
  };
}

/** The body a client reads: gunzipped when it was sent gzipped. */
const decoded = (response: WireResponse) =>
  response.headers['content-encoding'] === 'gzip' ? gunzipSync(response.body) : response.body;

describeOnStores('records on %s', (store) => {
  describe.each(PLATFORMS)('on %s', (platform) => {
    describe.each([
      ['from memory (the replay cache)', {}],
      ['from the store', { replayCache: false as const }],
    ])('replays %s', (_source, options) => {
      const logger = new RecordingLogger();
      const server = useTestApp(
        () => appOn(store, platform, options, logger),
        () => gates.releaseAll(),
      );
      const records = recordsOf(server, db);

      const post = (path: string, key: string, acceptEncoding?: string) =>
        postOnTheWire(
          `${server.url}${path}`,
          { 'Idempotency-Key': key, ...(acceptEncoding === undefined ? {} : { 'Accept-Encoding': acceptEncoding }) },
          { amount: 1 },
        );

      it('sends the compressed answer as it was sent to a client that accepts gzip, and decoded to one that does not', async () => {
        const key = randomUUID();
        const first = await post('/compressed', key, 'gzip');
        expect(first.status).toBe(201);
        expect(first.headers['content-encoding']).toBe('gzip');
        const answer = decoded(first);
        expect(JSON.parse(answer.toString())).toEqual({ run: 1, padding: COMPRESSED_PADDING });

        const gzipped = await post('/compressed', key, 'gzip');
        expect(gzipped.status).toBe(201);
        expect(gzipped.headers['idempotent-replay']).toBe('true');
        expect(gzipped.headers['content-encoding']).toBe('gzip');
        expect(gzipped.headers.vary).toMatch(/accept-encoding/i);
        expect(decoded(gzipped)).toEqual(answer);

        for (const acceptEncoding of [undefined, 'identity', 'gzip;q=0, br;q=0']) {
          const plain = await post('/compressed', key, acceptEncoding);
          expect(plain.status).toBe(201);
          expect(plain.headers['idempotent-replay']).toBe('true');
          expect(plain.headers['content-encoding']).toBeUndefined();
          expect(plain.headers['content-type']).toBe(first.headers['content-type']);
          expect(plain.headers['content-length']).toBe(String(answer.length));
          expect(plain.body).toEqual(answer);
        }
        expect(server.app.get(CompressedController).runsOf('create')).toBe(1);
        expect(logger.warnings).toEqual([]);
      });

      it('sends a duplicate that waited for the first attempt (inFlight: wait) its outcome decoded, when it does not accept gzip', async () => {
        const key = randomUUID();
        const gate = gates.holdNext();
        const first = post('/compressed/awaited', key, 'gzip');
        await gate.reached;
        const waiter = post('/compressed/awaited', key);
        await waitFor(async () => ((await records.of(key))?.awaited ? true : undefined), 'the duplicate to wait');
        gate.release();
        const [answered, waited] = await Promise.all([first, waiter]);
        expect(answered.headers['content-encoding']).toBe('gzip');
        expect(waited.status).toBe(201);
        expect(waited.headers['idempotent-replay']).toBe('true');
        expect(waited.headers['content-encoding']).toBeUndefined();
        expect(waited.body).toEqual(decoded(answered));
        expect(server.app.get(CompressedController).runsOf('awaited')).toBe(1);
      });
    });

    describe('what the module cannot replay readably', () => {
      const logger = new RecordingLogger();
      const server = useTestApp(() => appOn(store, platform, {}, logger));
      const records = recordsOf(server, db);

      it('a body in a coding it cannot decode is not stored: the claim is released, and the warning names the coding', async () => {
        const key = randomUUID();
        const post = () =>
          postOnTheWire(`${server.url}/compressed/custom-coding`, { 'Idempotency-Key': key }, { amount: 1 });
        const first = await post();
        expect(first.status).toBe(201);
        expect(first.headers['content-encoding']).toBe('x-custom');
        await waitFor(
          async () => ((await records.of(key)) === undefined ? true : undefined),
          'the claim to be released',
        );
        const retry = await post();
        expect(retry.headers['idempotent-replay']).toBeUndefined();
        expect(server.app.get(CompressedController).runsOf('custom-coding')).toBe(2);
        expect(logger.warnings).toEqual([
          'WARN [Idempotency] Responses of POST /compressed/custom-coding are not stored for replay (its Content-Encoding ' +
            'is x-custom, which the module cannot decode for a client that does not accept it); their claims are released.',
        ]);
      });

      // Transactional: PostgreSQL's alone.
      (store === 'postgres' ? it : it.skip)(
        "the module's own answer instead of a compressed one (503, the commit failed) is sent in no coding",
        async () => {
          const key = randomUUID();
          const answer = await postOnTheWire(
            `${server.url}/compressed/fails-at-commit`,
            { 'Idempotency-Key': key, 'Accept-Encoding': 'gzip' },
            { amount: 1 },
          );
          expect(answer.status).toBe(503);
          expect(answer.headers['content-encoding']).toBeUndefined();
          expect(JSON.parse(answer.body.toString())).toMatchObject({ error: 'idempotency_store_unavailable' });
          expect(logger.errors).toContain(
            `ERROR [Idempotency] Committing the work and outcome of key "${key}" of POST /compressed/fails-at-commit ` +
              'failed; the attempt is refused as the store being unavailable, and its retry gets the outcome if the commit went through after all, or runs ' +
              'again: QueryFailedError: duplicate key value violates unique constraint "checked_at_commit_v"',
          );
        },
      );
    });
  });

  describe('on fastify, with @fastify/compress', () => {
    const logger = new RecordingLogger();
    const server = useTestApp(() => appOn(store, 'fastify', {}, logger));
    const records = recordsOf(server, db);

    it('a body past its sync threshold, compressed as a stream, is not stored: the claim is released, and the warning says why', async () => {
      const key = randomUUID();
      const post = () =>
        postOnTheWire(
          `${server.url}/compressed/streamed`,
          { 'Idempotency-Key': key, 'Accept-Encoding': 'gzip' },
          { a: 1 },
        );
      const first = await post();
      expect(first.status).toBe(201);
      expect(first.headers['content-encoding']).toBe('gzip');
      expect(JSON.parse(gunzipSync(first.body).toString())).toEqual({ run: 1, padding: STREAMED_PADDING });
      await waitFor(async () => ((await records.of(key)) === undefined ? true : undefined), 'the claim to be released');
      const retry = await post();
      expect(retry.headers['idempotent-replay']).toBeUndefined();
      expect(server.app.get(CompressedController).runsOf('streamed')).toBe(2);
      expect(logger.warnings).toEqual([
        expect.stringContaining(
          'are not stored for replay (the response is streamed, by the handler or by a plugin such as compression',
        ),
      ]);
    });

    // Last: the app it starts gets every app's log lines from then on (Nest's logger is global).
    it('a stored body that no longer decodes within maxStoredBodyBytes (lowered since) is replayed in its coding, with a warning', async () => {
      const key = randomUUID();
      const first = await postOnTheWire(
        `${server.url}/compressed`,
        { 'Idempotency-Key': key, 'Accept-Encoding': 'gzip' },
        { amount: 1 },
      );
      expect(first.headers['content-encoding']).toBe('gzip');
      const loweredLogger = new RecordingLogger();
      // On Redis, on the first app's records.
      const lowered = await startTestApp(
        appOn(store, 'fastify', { maxStoredBodyBytes: 1024 }, loweredLogger, { keyPrefix: server.redis?.keyPrefix }),
      );
      try {
        const replay = await postOnTheWire(`${lowered.url}/compressed`, { 'Idempotency-Key': key }, { amount: 1 });
        expect(replay.headers['idempotent-replay']).toBe('true');
        expect(replay.headers['content-encoding']).toBe('gzip');
        expect(replay.body).toEqual(first.body);
      } finally {
        await lowered.app.close();
      }
      expect(loweredLogger.warnings).toEqual([
        'WARN [Idempotency] A stored response of POST /compressed does not decode within maxStoredBodyBytes (1024 ' +
          'bytes) for a client that does not accept its Content-Encoding: it is replayed in that coding.',
      ]);
    });
  });
});
