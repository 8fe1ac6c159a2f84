import { randomUUID } from 'node:crypto';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { TypeOrmModule } from '@nestjs/typeorm';
import express from 'express';
import request from 'supertest';
import {
  IDEMPOTENCY_MODULE_OPTIONS,
  Idempotent,
  IdempotencyModule,
  IdempotencyService,
  type IdempotencyModuleOptions,
  IdempotencySetupError,
  InMemoryIdempotencyStore,
} from '../../src/index.js';
import { IDEMPOTENCY_STORE, type IdempotencyStore } from '../../src/store/index.js';
import { idempotencyMigrations, IdempotencyPostgresModule } from '../../src/postgres/index.js';
import type { Platform } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { startTestApp } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';

/** Counts its runs, so that a test can tell a refused request never reached it. */
@Controller('charges')
class ChargesController {
  runs = 0;

  @Post()
  @Idempotent()
  create(@Body() body: unknown) {
    this.runs += 1;
    return { charged: body };
  }

  /** A public route: a resolver of its own, which needs no user. */
  @Post('public')
  @Idempotent({ accountResolver: () => 'public' })
  createPublic(@Body() body: unknown) {
    return this.create(body);
  }

  /** A route whose resolver reads a numeric id the request lacks: `Number(undefined)` is NaN. */
  @Post('nan-account')
  // (`getRequest()` is `any` unless typed, so a resolver like this one compiles without the cast in many apps.)
  @Idempotent({
    accountResolver: (context) =>
      Number(context.switchToHttp().getRequest<{ user?: { id: number } }>().user?.id) as unknown as string,
  })
  nanAccount() {
    return {};
  }

  /** A route whose resolver gives no account. */
  @Post('no-account')
  @Idempotent({ accountResolver: () => '' })
  noAccount() {
    this.runs += 1;
    return {};
  }

  /** A route whose resolver gives an account longer than the records table's index holds. */
  @Post('long-account')
  @Idempotent({ accountResolver: () => 'a'.repeat(2800) })
  longAccount() {
    this.runs += 1;
    return {};
  }

  /** A route whose resolver gives an account the records table cannot hold (PostgreSQL refuses a NUL character). */
  @Post('nul-account')
  @Idempotent({ accountResolver: () => 'acct\0' })
  nulAccount() {
    this.runs += 1;
    return {};
  }
}

/** The quick start's resolver, which reads the user a guard sets: these routes have no guard. */
const accountOfUser: IdempotencyModuleOptions['accountResolver'] = (context) =>
  context.switchToHttp().getRequest<{ user: { accountId: string } }>().user.accountId;

const db = useTestDatabase();
/** Nest's logger is process-wide: every application of this file logs here. */
const logger = new RecordingLogger();

const database = (name?: string) =>
  TypeOrmModule.forRoot({
    name,
    type: 'postgres',
    url: db.url,
    migrations: idempotencyMigrations(),
    migrationsRun: true,
  });

/** Compiles an application module with the module under `options` and the charges routes. */
async function compile(options: IdempotencyModuleOptions & { dataSource?: string }, databaseName?: string) {
  const { dataSource, ...moduleOptions } = options;
  return Test.createTestingModule({
    imports: [
      database(databaseName),
      IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot({ dataSource }), ...moduleOptions }),
    ],
    controllers: [ChargesController],
  }).compile();
}

/** Expects a start-up refusal: an `IdempotencySetupError` with `message`. */
async function expectSetupError(starting: Promise<unknown>, message: RegExp): Promise<void> {
  const error = await starting.then(
    () => undefined,
    (reason: unknown) => reason,
  );
  expect(error).toBeInstanceOf(IdempotencySetupError);
  expect((error as Error).message).toMatch(message);
}

/** Expects `app` to refuse to start with `message`, then closes what it had opened. */
async function expectRefusal(app: INestApplication, message: RegExp): Promise<void> {
  await expectSetupError(app.init(), message);
  await app.close();
}

/** The charges routes on `platform` with `rawBody: true`, initialised after `configure` (parsers of the application). */
async function startCharges(platform: Platform, configure?: (app: INestApplication) => unknown) {
  const { app } = await startTestApp({
    platform,
    listen: false,
    database: db,
    idempotency: { singleTenant: true },
    controllers: [ChargesController],
    logger,
    configure,
  });
  return app;
}

/** A POST of `body` as `contentType` to the charges route, with a new key. */
const postAs = (app: INestApplication, contentType: string, body: string) =>
  request(app.getHttpServer())
    .post('/charges')
    .set('Idempotency-Key', randomUUID())
    .set('Content-Type', contentType)
    .send(body);

/** Runs `test` on `app`, then closes it whatever the outcome. */
async function closingAfter(app: INestApplication, test: (app: INestApplication) => Promise<void>): Promise<void> {
  try {
    await test(app);
  } finally {
    await app.close();
  }
}

const recordCount = async () =>
  (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM idempotency_records'))[0].n;
const errorsAbout = (text: string) => logger.errors.filter((line) => line.includes(text));

describe('the raw body', () => {
  it('an application created without rawBody: true refuses to start, naming the setting', async () => {
    const app = (await compile({ singleTenant: true })).createNestApplication({ logger });
    await expectRefusal(
      app,
      /created without `rawBody: true`: create it with `NestFactory\.create\(AppModule, \{ rawBody: true \}\)`/,
    );
  });

  it('a body parsed without its raw bytes (a parser of the application) is a 500 of the server, logged once with the fix', async () => {
    // Registered first, so Nest leaves out its own JSON parser, which would keep the bytes.
    const app = await startCharges('express', (app) => app.use(express.json()));
    await closingAfter(app, async () => {
      for (let attempt = 0; attempt < 2; attempt++) {
        const response = await request(app.getHttpServer())
          .post('/charges')
          .set('Idempotency-Key', randomUUID())
          .send({ amount: 1 });
        expect(response.status).toBe(500);
        expect(response.body.error).toBe('idempotency_misconfigured');
        expect(response.body.message).toMatch(
          /server is misconfigured.*Retrying will not help until the server is fixed/,
        );
      }
      expect(app.get(ChargesController).runs).toBe(0);
      expect(await recordCount()).toBe(0);
      expect(errorsAbout('raw body bytes')).toEqual([
        expect.stringMatching(
          /does not keep them as `req\.rawBody`: create it with `NestFactory\.create\(AppModule, \{ rawBody: true \}\)`/,
        ),
      ]);
    });
  });
});

describe('the platform', () => {
  it('starts on Fastify created with rawBody: true, and fingerprints its raw body', async () => {
    await closingAfter(await startCharges('fastify'), async (app) => {
      const key = randomUUID();
      const send = (body: string) =>
        request(app.getHttpServer())
          .post('/charges')
          .set('Idempotency-Key', key)
          .set('Content-Type', 'application/json')
          .send(body);
      const first = await send('{"amount":1}').expect(201);
      const replay = await send('{"amount":1}').expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      // The same JSON spelled otherwise: other bytes, another request.
      expect((await send('{ "amount": 1 }').expect(422)).body.error).toBe('idempotency_key_reuse');
    });
  });

  /** A Fastify application with `rawBody: true` and a content type parser of its own for `mediaType`, which keeps no raw bytes. */
  const fastifyWithParserOf = (mediaType: string, parse: (body: string) => unknown) =>
    startCharges('fastify', (app) =>
      (app as NestFastifyApplication)
        .getHttpAdapter()
        .getInstance()
        .addContentTypeParser(mediaType, { parseAs: 'string' }, (_request, body, done) =>
          done(null, parse(body as string)),
        ),
    );

  it('on Fastify, a body parsed without its raw bytes (a content type parser of the application) is a 500 of the server, logged once with the fix', async () => {
    const app = await fastifyWithParserOf('application/vnd.api+json', (body) => JSON.parse(body));
    const errorsBefore = errorsAbout('raw body bytes').length;
    const recordsBefore = await recordCount();
    await closingAfter(app, async () => {
      for (let attempt = 0; attempt < 2; attempt++) {
        const response = await postAs(app, 'application/vnd.api+json', '{"amount":1}');
        expect(response.status).toBe(500);
        expect(response.body.error).toBe('idempotency_misconfigured');
        expect(response.body.message).toMatch(/server is misconfigured/);
      }
      expect(app.get(ChargesController).runs).toBe(0);
      expect(await recordCount()).toBe(recordsBefore);
      expect(errorsAbout('raw body bytes').slice(errorsBefore)).toEqual([
        expect.stringMatching(/does not keep them as `req\.rawBody`: .*on Fastify, .*`app\.useBodyParser\(/),
      ]);
    });
  });

  it('on Fastify, the fix the log names (`app.useBodyParser(type, options, parser)`) keeps the raw bytes', async () => {
    const app = await startCharges('fastify', (app) =>
      (app as NestFastifyApplication).useBodyParser('application/vnd.api+json', {}, (_request, body, done) =>
        done(null, JSON.parse(String(body))),
      ),
    );
    await closingAfter(app, async () => {
      const response = await postAs(app, 'application/vnd.api+json', '{"amount":1}').expect(201);
      expect(response.body).toEqual({ charged: { amount: 1 } });
    });
  });

  it("on Fastify, a text/plain body parsed by the application's own parser is a 500 as well; by Fastify's, a 415", async () => {
    await closingAfter(await fastifyWithParserOf('text/plain', (body) => ({ text: body })), async (own) => {
      const response = await postAs(own, 'text/plain', 'amount=1');
      expect(response.status).toBe(500);
      expect(response.body.error).toBe('idempotency_misconfigured');
    });
    await closingAfter(await startCharges('fastify'), async (app) => {
      const response = await postAs(app, 'text/plain; charset=utf-8', 'amount=1');
      expect(response.status).toBe(415);
      expect(response.body.error).toBe('idempotency_body_unsupported');
    });
  });

  it('refuses to start on Fastify without rawBody: true, naming the setting for Fastify', async () => {
    const app = (await compile({ singleTenant: true })).createNestApplication(new FastifyAdapter(), { logger });
    await expectRefusal(
      app,
      /created without `rawBody: true`: .*`NestFactory\.create\(AppModule, new FastifyAdapter\(\), \{ rawBody: true \}\)`/,
    );
  });

  it('refuses to start on a platform other than Express and Fastify', async () => {
    /** An adapter of a platform the module does not know (Express underneath, so that Nest can start it). */
    class KoaLikeAdapter extends ExpressAdapter {
      override getType(): string {
        return 'koa';
      }
    }
    const app = (await compile({ singleTenant: true })).createNestApplication(new KoaLikeAdapter(), {
      rawBody: true,
      logger,
    });
    await expectRefusal(app, /supports the Express and Fastify platforms .* and this application runs on koa/);
  });
});

describe('an application without idempotent routes', () => {
  /** Only IdempotencyService.execute() (a consumer, a job) in an application that also serves HTTP. */
  async function compileWithoutRoutes() {
    return Test.createTestingModule({
      imports: [
        database(),
        IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), singleTenant: true }),
      ],
    }).compile();
  }

  it.each([
    ['on Express without rawBody: true', () => undefined],
    ['on Fastify without rawBody: true', () => new FastifyAdapter()],
    [
      'on a platform the module does not serve',
      () =>
        new (class extends ExpressAdapter {
          override getType(): string {
            return 'koa';
          }
        })(),
    ],
  ])('starts %s, and execute() works', async (_, adapter) => {
    const moduleRef = await compileWithoutRoutes();
    const platform = adapter();
    const app = platform
      ? moduleRef.createNestApplication(platform, { logger })
      : moduleRef.createNestApplication({ logger });
    try {
      await app.init();
      const { result } = await app
        .get(IdempotencyService)
        .execute({ name: 'payout', key: randomUUID(), input: { amount: 1 } }, async () => 'paid');
      expect(result).toBe('paid');
    } finally {
      await app.close();
    }
  });
});

describe('option values', () => {
  /** As a configuration service reads them from the environment: strings. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- strings where numbers are expected, as an untyped config hands them over
  const environment: Record<string, any> = { TTL: '3600', BATCH: '1000', RETRIES: '5' };

  it.each([
    ['ttlSeconds', { ttlSeconds: environment.TTL }, /ttlSeconds must be a positive number, got the string "3600"/],
    [
      'purgeBatchSize',
      { purgeBatchSize: environment.BATCH },
      /purgeBatchSize must be a positive integer, got the string "1000"/,
    ],
    [
      'finalizeRetries',
      { finalizeRetries: environment.RETRIES },
      /finalizeRetries must be a whole number, got the string "5"/,
    ],
  ])('a string for %s is refused at start-up, saying it is a string', async (_name, options, message) => {
    await expect(compile({ singleTenant: true, ...options })).rejects.toThrow(message);
  });

  it("a route's wrong HTTP option is refused at start-up, naming it; the same on a handler that is no route is not HTTP's to check", async () => {
    @Controller('refunds')
    class RefundsController {
      @Post()
      @Idempotent({ maxStoredBodyBytes: 0 })
      create() {
        return {};
      }
    }
    /** A consumer's handler: the HTTP options it carries are none of HTTP's business. */
    class RefundsConsumer {
      @Idempotent({ maxStoredBodyBytes: 0 })
      refund() {}
    }
    const withControllers = (...controllers: (new () => object)[]) =>
      Test.createTestingModule({
        imports: [
          database(),
          IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), singleTenant: true }),
        ],
        controllers,
      }).compile();

    await expect(withControllers(RefundsController)).rejects.toThrow(
      /maxStoredBodyBytes must be a positive number, got the number 0/,
    );
    const moduleRef = await withControllers(RefundsConsumer);
    await moduleRef.close();
  });
});

describe('the store and its data source', () => {
  it('a module without `store` is refused, naming both stores (the compiler asks for it; JavaScript may not)', () => {
    const withoutStore = { singleTenant: true } as Parameters<typeof IdempotencyModule.forRoot>[0];
    expect(() => IdempotencyModule.forRoot(withoutStore)).toThrow(
      /needs to be told where its records live: .*store: IdempotencyPostgresModule\.forRoot\(\).*new InMemoryIdempotencyStore\(\)/,
    );
  });

  it('a `store` that is neither a store nor a module is refused', () => {
    const store = { tableName: 'idempotency_records' } as unknown as IdempotencyStore;
    expect(() => IdempotencyModule.forRoot({ singleTenant: true, store })).toThrow(/is neither a store nor a module/);
  });

  it('a `store` of null is refused like a missing one', () => {
    const store = null as unknown as IdempotencyStore;
    expect(() => IdempotencyModule.forRoot({ singleTenant: true, store })).toThrow(
      /needs to be told where its records live/,
    );
  });

  // A factory's return value is not checked by TypeScript: a 0.1 configuration's PostgreSQL options would be ignored.
  it("the PostgreSQL store's options returned by a forRootAsync factory refuse the start, saying where they go", async () => {
    const starting = Test.createTestingModule({
      imports: [
        database(),
        IdempotencyModule.forRootAsync({
          store: IdempotencyPostgresModule.forRoot(),
          useFactory: () => ({ singleTenant: true, enlistDataSource: true, tableName: 'idempotency_records' }),
        }),
      ],
    }).compile();
    await expectSetupError(
      starting,
      /got tableName, enlistDataSource, which belong to the PostgreSQL store since 0\.2\.0: give them to `store: IdempotencyPostgresModule\.forRoot\(\{ tableName, enlistDataSource \}\)`/,
    );
  });

  it('a module that provides something else than a store under IDEMPOTENCY_STORE refuses the start', async () => {
    @Module({ providers: [{ provide: IDEMPOTENCY_STORE, useValue: { hello: 1 } }], exports: [IDEMPOTENCY_STORE] })
    class NotAStoreModule {}
    await expectSetupError(
      Test.createTestingModule({
        imports: [IdempotencyModule.forRoot({ store: NotAStoreModule, singleTenant: true })],
      }).compile(),
      /IDEMPOTENCY_STORE is not an IdempotencyStore \(it has no claim method\): got an object/,
    );
  });

  it("a store's class without `new` is refused, naming the instance to give", () => {
    const store = InMemoryIdempotencyStore as unknown as IdempotencyStore;
    expect(() => IdempotencyModule.forRoot({ singleTenant: true, store })).toThrow(
      /`store` is the class InMemoryIdempotencyStore, not a store: give an instance, `store: new InMemoryIdempotencyStore\(\)`/,
    );
  });

  // The compiler accepts it: a module's class is a way to give a store.
  it('a configurable store module without its forRoot() is refused, naming the call', () => {
    expect(() => IdempotencyModule.forRoot({ singleTenant: true, store: IdempotencyPostgresModule })).toThrow(
      /`store` is the module IdempotencyPostgresModule itself.*`store: IdempotencyPostgresModule\.forRoot\(\)`/,
    );
  });

  it('`store` is wiring, not an option: the options the module provides do not hold it', async () => {
    const store = new InMemoryIdempotencyStore();
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ store, singleTenant: true, ttlSeconds: 60 })],
    }).compile();
    try {
      expect(moduleRef.get(IDEMPOTENCY_MODULE_OPTIONS)).toEqual({ singleTenant: true, ttlSeconds: 60 });
    } finally {
      await moduleRef.close();
    }
  });

  it('two copies of the module with different options refuse the start: each would claim every request', async () => {
    @Module({ imports: [IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), singleTenant: true })] })
    class BillingModule {}
    await expectSetupError(
      Test.createTestingModule({
        imports: [
          BillingModule,
          IdempotencyModule.forRoot({ store: new InMemoryIdempotencyStore(), singleTenant: true, ttlSeconds: 60 }),
        ],
      }).compile(),
      /IdempotencyModule is imported 2 times with different options, .*call IdempotencyModule\.forRoot\(\) \(or forRootAsync\(\)\) once, in the root module/,
    );
  });

  it('a named data source without `dataSource` is refused with a hint at the option', async () => {
    await expectSetupError(
      compile({ singleTenant: true }, 'ledger'),
      /on the default TypeORM data source, and the application has none: .*`IdempotencyPostgresModule\.forRoot\(\{ dataSource: '/,
    );
  });

  it('a `dataSource` that names no data source is refused, saying so', async () => {
    await expectSetupError(
      compile({ singleTenant: true, dataSource: 'ledgr' }, 'ledger'),
      /was given `dataSource: 'ledgr'`, but the application has no TypeORM data source of that name/,
    );
  });
});

describe('requests the module answers itself', () => {
  let app: INestApplication;

  beforeAll(async () => {
    app = (await compile({ accountResolver: accountOfUser })).createNestApplication({ rawBody: true, logger });
    await app.init();
  });

  afterAll(async () => {
    await app?.close();
  });

  const charge = (path = '/charges') => request(app.getHttpServer()).post(path).set('Idempotency-Key', randomUUID());

  it('a body of an unsupported type is a 415 that names the supported ones', async () => {
    const response = await charge('/charges/public').set('Content-Type', 'text/plain').send('amount=1');
    expect(response.status).toBe(415);
    expect(response.body.error).toBe('idempotency_body_unsupported');
    expect(response.body.message).toBe(
      'The body of this request (text/plain) cannot be fingerprinted for idempotency: send it as application/json or ' +
        'application/x-www-form-urlencoded.',
    );
  });

  it('a multipart body is a 415 that names multipart/form-data and what is supported instead', async () => {
    const response = await charge('/charges/public').field('amount', '1');
    expect(response.status).toBe(415);
    expect(response.body.error).toBe('idempotency_body_unsupported');
    expect(response.body.message).toMatch(
      /\(multipart\/form-data\) cannot be .* send it as application\/json or application\/x-www-form-urlencoded/,
    );
  });

  it('an accountResolver that throws (no guard set the user) is a 500 of the module, logged once for the route', async () => {
    const before = await recordCount();
    for (let attempt = 0; attempt < 2; attempt++) {
      const response = await charge().send({ amount: 1 });
      expect(response.status).toBe(500);
      expect(response.body).toEqual({
        statusCode: 500,
        error: 'idempotency_account_unresolved',
        message: 'This server could not tell which account the request belongs to, so the request was not processed.',
      });
    }
    expect(app.get(ChargesController).runs).toBe(0);
    expect(await recordCount()).toBe(before);
    expect(errorsAbout('(POST /charges)')).toEqual([
      expect.stringMatching(
        /ChargesController\.create \(POST \/charges\): it threw TypeError: Cannot read properties of undefined .*runs after guards.*`@Idempotent\(\{ accountResolver \}\)`/,
      ),
    ]);
  });

  // Review of issue #10: NaN is a number, so it passed as the account "NaN", shared by every request without a user.
  it('an accountResolver that returns NaN is a 500 of the module, not the account "NaN"', async () => {
    const response = await charge('/charges/nan-account').send({});
    expect(response.status).toBe(500);
    expect(response.body.error).toBe('idempotency_account_unresolved');
    expect(errorsAbout('(POST /charges/nan-account)')).toEqual([expect.stringMatching(/it returned the number NaN/)]);
  });

  it('an accountResolver that returns no account is a 500 of the module, logged once with what it returned', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      const response = await charge('/charges/no-account').send({});
      expect(response.status).toBe(500);
      expect(response.body.error).toBe('idempotency_account_unresolved');
    }
    expect(app.get(ChargesController).runs).toBe(0);
    expect(errorsAbout('(POST /charges/no-account)')).toEqual([
      expect.stringMatching(/ChargesController\.noAccount \(POST \/charges\/no-account\): it returned the string ""/),
    ]);
  });

  it('an account too long for the records table is a 500 of the module, not a 503 retried for ever', async () => {
    const before = await recordCount();
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const response = await charge('/charges/long-account').set('Idempotency-Key', 'k'.repeat(255)).send({});
      expect(response.status).toBe(500);
      expect(response.body.error).toBe('idempotency_account_unresolved');
    }
    expect(app.get(ChargesController).runs).toBe(0);
    expect(await recordCount()).toBe(before);
    // Logged once for the route, however often its clients retry.
    expect(errorsAbout('(POST /charges/long-account)')).toEqual([
      expect.stringContaining('(it is longer than 1000 bytes)'),
    ]);
  });

  it('an account with a NUL character is a 500 of the module, not a 503 the client would retry for ever', async () => {
    const before = await recordCount();
    const response = await charge('/charges/nul-account').send({});
    expect(response.status).toBe(500);
    expect(response.body.error).toBe('idempotency_account_unresolved');
    expect(app.get(ChargesController).runs).toBe(0);
    expect(await recordCount()).toBe(before);
    expect(errorsAbout('(POST /charges/nul-account)')).toEqual([
      expect.stringContaining('it returned the string "acct\\u0000" (it holds a NUL character)'),
    ]);
  });
});
