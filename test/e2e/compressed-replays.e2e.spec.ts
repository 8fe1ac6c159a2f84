import { randomUUID } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import fastifyCompress from '@fastify/compress';
import { Controller, type INestApplication, Post, Req, Res } from '@nestjs/common';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import compression from 'compression';
import { type IdempotencyModuleOptions, Idempotent } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { GateQueue } from '../support/gate.js';
import { postOnTheWire, type WireResponse } from '../support/on-the-wire.js';
import { type Platform, PLATFORMS, type PlatformRequest, type PlatformResponse } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { startTestApp } from '../support/test-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
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

  constructor(private readonly context: PostgresIdempotencyContext) {}

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

  /** Breaks a constraint checked only at commit: the module answers 503 instead of the compressed answer. */
  @Post('fails-at-commit')
  @Idempotent({ transactional: true })
  async failsAtCommit() {
    await this.context.manager!.query('INSERT INTO checked_at_commit (v) VALUES (1), (1)');
    return { run: this.run('fails-at-commit'), padding: COMPRESSED_PADDING };
  }
}

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query(
    'CREATE TABLE checked_at_commit (v int, CONSTRAINT checked_at_commit_v UNIQUE (v) DEFERRABLE INITIALLY DEFERRED)',
  );
});

afterAll(async () => {
  gates.releaseAll(); // a failed test may leave a handler waiting at its gate
  await db?.drop();
});

/** The app with the platform's compression at its defaults: `@fastify/compress` on Fastify, `compression` on Express. */
async function startApp(platform: Platform, options: Partial<IdempotencyModuleOptions>, logger: RecordingLogger) {
  const { app, url } = await startTestApp({
    platform,
    database: db,
    idempotency: { singleTenant: true, ...options },
    controllers: [CompressedController],
    logger,
    // The plugin is registered before the application starts, as an application does in its main.ts.
    configure: (app) => {
      if (platform === 'fastify')
        return (app as NestFastifyApplication).register(fastifyCompress).then(() => undefined);
      else app.use(compression());
    },
  });
  return { app, url };
}

/** The body a client reads: gunzipped when it was sent gzipped. */
const decoded = (response: WireResponse) =>
  response.headers['content-encoding'] === 'gzip' ? gunzipSync(response.body) : response.body;

const recordCount = async (key: string) =>
  (
    await db.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency_records WHERE idempotency_key = $1', [
      key,
    ])
  )[0].n;

describe.each(PLATFORMS)('on %s', (platform) => {
  describe.each([
    ['from memory (the replay cache)', {}],
    ['from the store', { replayCache: false as const }],
  ])('replays %s', (_source, options) => {
    const logger = new RecordingLogger();
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      ({ app, url } = await startApp(platform, options, logger));
    });

    afterAll(async () => {
      gates.releaseAll();
      await app?.close();
    });

    const post = (path: string, key: string, acceptEncoding?: string) =>
      postOnTheWire(
        `${url}${path}`,
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
      expect(app.get(CompressedController).runsOf('create')).toBe(1);
      expect(logger.warnings).toEqual([]);
    });

    it('sends a duplicate that waited for the first attempt (inFlight: wait) its outcome decoded, when it does not accept gzip', async () => {
      const key = randomUUID();
      const gate = gates.holdNext();
      const first = post('/compressed/awaited', key, 'gzip');
      await gate.reached;
      const waiter = post('/compressed/awaited', key);
      await waitFor(
        async () =>
          (await db.query('SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND awaited', [key])).length
            ? true
            : undefined,
        'the duplicate to wait',
      );
      gate.release();
      const [answered, waited] = await Promise.all([first, waiter]);
      expect(answered.headers['content-encoding']).toBe('gzip');
      expect(waited.status).toBe(201);
      expect(waited.headers['idempotent-replay']).toBe('true');
      expect(waited.headers['content-encoding']).toBeUndefined();
      expect(waited.body).toEqual(decoded(answered));
      expect(app.get(CompressedController).runsOf('awaited')).toBe(1);
    });
  });

  describe('what the module cannot replay readably', () => {
    const logger = new RecordingLogger();
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      ({ app, url } = await startApp(platform, {}, logger));
    });

    afterAll(async () => {
      await app?.close();
    });

    it('a body in a coding it cannot decode is not stored: the claim is released, and the warning names the coding', async () => {
      const key = randomUUID();
      const post = () => postOnTheWire(`${url}/compressed/custom-coding`, { 'Idempotency-Key': key }, { amount: 1 });
      const first = await post();
      expect(first.status).toBe(201);
      expect(first.headers['content-encoding']).toBe('x-custom');
      await waitFor(async () => ((await recordCount(key)) === 0 ? true : undefined), 'the claim to be released');
      const retry = await post();
      expect(retry.headers['idempotent-replay']).toBeUndefined();
      expect(app.get(CompressedController).runsOf('custom-coding')).toBe(2);
      expect(logger.warnings).toEqual([
        'WARN [Idempotency] Responses of POST /compressed/custom-coding are not stored for replay (its Content-Encoding ' +
          'is x-custom, which the module cannot decode for a client that does not accept it); their claims are released.',
      ]);
    });

    it("the module's own answer instead of a compressed one (503, the commit failed) is sent in no coding", async () => {
      const key = randomUUID();
      const answer = await postOnTheWire(
        `${url}/compressed/fails-at-commit`,
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
    });
  });
});

describe('on fastify, with @fastify/compress', () => {
  const logger = new RecordingLogger();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await startApp('fastify', {}, logger));
  });

  afterAll(async () => {
    await app?.close();
  });

  it('a body past its sync threshold, compressed as a stream, is not stored: the claim is released, and the warning says why', async () => {
    const key = randomUUID();
    const post = () =>
      postOnTheWire(`${url}/compressed/streamed`, { 'Idempotency-Key': key, 'Accept-Encoding': 'gzip' }, { a: 1 });
    const first = await post();
    expect(first.status).toBe(201);
    expect(first.headers['content-encoding']).toBe('gzip');
    expect(JSON.parse(gunzipSync(first.body).toString())).toEqual({ run: 1, padding: STREAMED_PADDING });
    await waitFor(async () => ((await recordCount(key)) === 0 ? true : undefined), 'the claim to be released');
    const retry = await post();
    expect(retry.headers['idempotent-replay']).toBeUndefined();
    expect(app.get(CompressedController).runsOf('streamed')).toBe(2);
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
      `${url}/compressed`,
      { 'Idempotency-Key': key, 'Accept-Encoding': 'gzip' },
      { amount: 1 },
    );
    expect(first.headers['content-encoding']).toBe('gzip');
    const loweredLogger = new RecordingLogger();
    const lowered = await startApp('fastify', { maxStoredBodyBytes: 1024 }, loweredLogger);
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
