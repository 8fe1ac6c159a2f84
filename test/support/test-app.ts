import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import type {
  DynamicModule,
  INestApplication,
  INestApplicationContext,
  ModuleMetadata,
  NestApplicationOptions,
  Provider,
  Type,
} from '@nestjs/common';
import type { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test, type TestingModule } from '@nestjs/testing';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import type { Redis } from 'ioredis';
import type { DataSource, EntitySchema, MigrationInterface } from 'typeorm';
import { IdempotencyModule, type IdempotencyModuleOptions, InMemoryIdempotencyStore } from '../../src/index.js';
import { IDEMPOTENCY_STORE, type IdempotencyStore } from '../../src/store/index.js';
import {
  idempotencyMigrations,
  IdempotencyPostgresModule,
  type IdempotencyPostgresOptions,
} from '../../src/postgres/index.js';
import { madeBeforeAll } from './made-before-all.js';
import { createPlatformApp, type Platform } from './platforms.js';
import { RecordingLogger } from './recording-logger.js';
import type { TestDatabase } from './test-database.js';

/**
 * One way to build the Nest application (or application context) of a test: the module on the PostgreSQL store of
 * the test file's database (its migrations run), on the Redis store (`redis`, the spec's own tables still on its
 * database), or on the in-memory store, the spec's controllers and providers, on Express or Fastify with
 * `rawBody: true`, logging into a `RecordingLogger`. A spec names only what it tests.
 */

/** The records on PostgreSQL: TypeORM's data source on `database`, `idempotencyMigrations()` run at start. */
export interface OnPostgres {
  /** The test file's database (`createTestDatabase()`), or any `{ url }` that reaches it (a `TcpProxy`'s). */
  database: { url: string };
  /** Options of `IdempotencyPostgresModule.forRoot()`. */
  postgres?: IdempotencyPostgresOptions;
  /** A named data source: TypeORM's `name`, and the store's `dataSource`. Default: the default data source. */
  dataSourceName?: string;
  /** The pool's options (TypeORM's `extra`: `max`, `connectionTimeoutMillis`). */
  pool?: Record<string, unknown>;
  /** The spec's entities, on the data source. */
  entities?: Array<Type | EntitySchema>;
  /** The spec's migrations, run after the records table's. */
  migrations?: Array<new () => MigrationInterface>;
  /** Entities whose repositories the spec injects (`TypeOrmModule.forFeature`). */
  features?: Parameters<typeof TypeOrmModule.forFeature>[0];
  /** Replaces `IDEMPOTENCY_STORE` with a store the spec builds on the data source (a subclass of the real one). */
  overrideStore?: (dataSource: DataSource) => IdempotencyStore;
  store?: never;
  redis?: never;
}

/**
 * The records on Redis (`IdempotencyRedisModule`, standard mode only), and TypeORM's data source on `database` when
 * the spec gives one, for its own tables: without the records table, so that a test that still looked for records
 * there would fail rather than find none.
 */
export interface OnRedis {
  redis: RedisRecords;
  /** The test file's database, for the spec's own tables (`entities`, `migrations`, `features`). Default: none. */
  database?: { url: string };
  dataSourceName?: string;
  pool?: Record<string, unknown>;
  entities?: Array<Type | EntitySchema>;
  migrations?: Array<new () => MigrationInterface>;
  features?: Parameters<typeof TypeOrmModule.forFeature>[0];
  postgres?: never;
  overrideStore?: never;
  store?: never;
}

/** Where on Redis an app keeps its records, as the spec wants them. */
export interface RedisRecords {
  /**
   * The store's client, the spec's to quit (one through a `TcpProxy`, to take Redis away). Default: a new client of
   * the Redis at `REDIS_URL`, quit once the app has closed (after Nest's shutdown, which still uses it).
   */
  client?: Redis;
  /**
   * The Redis at this URL rather than at `REDIS_URL` (a `TcpProxy`'s in front of it, to take it away), on a client the
   * helper makes and quits as its default one. With `client`, ignored.
   */
  url?: string;
  /**
   * Default: a key prefix of the app's own, so that no other app, of this file or another, sees its records (and its
   * records are deleted when it closes). Another app's (`TestApp.redis.keyPrefix`): the records that app keeps.
   */
  keyPrefix?: string;
  /** The store's `outcomeWaits`. Default: its own (`pubsub`). */
  outcomeWaits?: 'pubsub' | 'polling';
}

/** The records in memory: no database, no TypeORM module. */
export interface InMemory {
  database: 'memory';
  /** The store, to drive its clock or read it. Default: a new `InMemoryIdempotencyStore`. */
  store?: InMemoryIdempotencyStore;
  postgres?: never;
  dataSourceName?: never;
  pool?: never;
  entities?: never;
  migrations?: never;
  features?: never;
  overrideStore?: never;
  redis?: never;
}

/** `IdempotencyModule.forRoot(options)`, or `forRootAsync(options)`; the store is given by the helper. */
export type ModuleRegistration =
  | { idempotency: IdempotencyModuleOptions; idempotencyAsync?: never }
  | { idempotencyAsync: Omit<Parameters<typeof IdempotencyModule.forRootAsync>[0], 'store'>; idempotency?: never };

export type TestModuleOptions = (OnPostgres | OnRedis | InMemory) &
  ModuleRegistration & {
    controllers?: Type[];
    providers?: Provider[];
    /** More modules, after TypeORM's and the idempotency module. */
    imports?: ModuleMetadata['imports'];
    /** Where Nest logs, from the compilation on. Default: a new one (returned). */
    logger?: RecordingLogger;
  };

export interface TestAppOptions {
  /** Default: Express. */
  platform?: Platform;
  /** More options of the application, over `{ rawBody: true, logger }`. */
  appOptions?: NestApplicationOptions;
  /** Fastify's own options (`handlerTimeout`), on Fastify. */
  fastify?: ConstructorParameters<typeof FastifyAdapter>[0];
  /** What the spec sets on the application before it starts: global interceptors, filters, versioning, hooks. */
  configure?: (app: INestApplication) => unknown;
  /**
   * Listen on a free port of 127.0.0.1 (`url`). Default: true. Else the application is only initialised (Fastify
   * made ready), for `request(app.getHttpServer())`.
   */
  listen?: boolean;
}

/** Where an app keeps its records on Redis, for a test to read them (`recordsOf`); none on another store. */
export interface RecordsPlace {
  /** A client of the Redis the records are on, straight (not through a spec's proxy), and their key prefix. */
  readonly redis?: { client: Redis; keyPrefix: string };
}

export interface TestApp extends RecordsPlace {
  app: INestApplication;
  moduleRef: TestingModule;
  /** Where the application listens (`http://127.0.0.1:port`); started with `listen: false`, it throws. */
  readonly url: string;
  logger: RecordingLogger;
  close(): Promise<void>;
}

export interface TestContext extends RecordsPlace {
  context: INestApplicationContext;
  moduleRef: TestingModule;
  logger: RecordingLogger;
  close(): Promise<void>;
}

/** The testing module of `options`, compiled; what `startTestApp`, `startTestContext` and consumers start. */
export interface CompiledTestModule extends RecordsPlace {
  moduleRef: TestingModule;
  logger: RecordingLogger;
  /**
   * Makes `close` of the application made of `moduleRef` also end what the helper opened for it (the Redis client),
   * once Nest's shutdown is over; returns the application. Whichever way a test closes it, `app.close()` included.
   */
  closing<App extends INestApplicationContext>(app: App): App;
  /** Ends what the helper opened, for a module whose application never started (its start refused). */
  abandon(): Promise<void>;
}

/** Compiles the testing module of `options`: what `startTestApp` and `startTestContext` start. */
export async function compileTestModule(options: TestModuleOptions): Promise<CompiledTestModule> {
  const logger = options.logger ?? new RecordingLogger();
  const redis = isOnRedis(options) ? await openRedisRecords(options.redis) : undefined;
  try {
    const store =
      options.database === 'memory'
        ? (options.store ?? new InMemoryIdempotencyStore())
        : redis !== undefined
          ? redis.module
          : IdempotencyPostgresModule.forRoot({
              ...options.postgres,
              ...(options.dataSourceName === undefined ? {} : { dataSource: options.dataSourceName }),
            });
    const idempotency = options.idempotencyAsync
      ? IdempotencyModule.forRootAsync({ store, ...options.idempotencyAsync })
      : IdempotencyModule.forRoot({ store, ...options.idempotency });
    let builder = Test.createTestingModule({
      imports: [...databaseModules(options), idempotency, ...(options.imports ?? [])],
      controllers: options.controllers,
      providers: options.providers,
    });
    if (!isOnRedis(options) && options.database !== 'memory' && options.overrideStore) {
      builder = builder.overrideProvider(IDEMPOTENCY_STORE).useFactory({
        factory: options.overrideStore,
        inject: [getDataSourceToken(options.dataSourceName)],
      });
    }
    const moduleRef = await builder.setLogger(logger).compile();
    return {
      moduleRef,
      logger,
      redis: redis?.place,
      closing: (app) => {
        if (redis === undefined) return app;
        const close = app.close.bind(app);
        let closed: Promise<void> | undefined;
        // Nest's shutdown (the module's drain, its last outcomes) still uses the client: it ends after.
        app.close = () => (closed ??= close().finally(() => redis.end()));
        return app;
      },
      abandon: async () => redis?.end(),
    };
  } catch (error) {
    await redis?.end();
    throw error;
  }
}

function isOnRedis(options: TestModuleOptions): options is OnRedis & TestModuleOptions {
  return options.redis !== undefined;
}

function databaseModules(options: TestModuleOptions): DynamicModule[] {
  if (options.database === 'memory' || options.database === undefined) return [];
  const { database, dataSourceName, pool, entities, migrations, features } = options;
  return [
    TypeOrmModule.forRoot({
      ...(dataSourceName === undefined ? {} : { name: dataSourceName }),
      type: 'postgres',
      url: database.url,
      ...(entities === undefined ? {} : { entities }),
      // On Redis the records table is not made: the records are not there.
      migrations: [...(isOnRedis(options) ? [] : idempotencyMigrations()), ...(migrations ?? [])],
      migrationsRun: true,
      ...(pool === undefined ? {} : { extra: pool }),
    }),
    ...(features === undefined ? [] : [TypeOrmModule.forFeature(features, dataSourceName)]),
  ];
}

/** The application of `options`, started: listening on a free loopback port unless `listen: false`. */
export async function startTestApp(options: TestModuleOptions & TestAppOptions): Promise<TestApp> {
  const compiled = await compileTestModule(options);
  const { moduleRef, logger } = compiled;
  const platform = options.platform ?? 'express';
  let app: INestApplication;
  let url: string | undefined;
  try {
    app = compiled.closing(
      createPlatformApp(moduleRef, platform, { rawBody: true, logger, ...options.appOptions }, options.fastify),
    );
    await options.configure?.(app);
    if (options.listen ?? true) {
      await app.listen(0, '127.0.0.1');
      url = await app.getUrl();
    } else {
      await app.init();
      if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
    }
  } catch (error) {
    await compiled.abandon();
    throw error;
  }
  return {
    app,
    moduleRef,
    logger,
    redis: compiled.redis,
    get url(): string {
      if (url === undefined)
        throw new Error('the app was started with listen: false: use request(app.getHttpServer())');
      return url;
    },
    close: () => app.close(),
  };
}

/**
 * The application of `options` for the block's tests: started in a `beforeAll` (`options` is read then, once the
 * file's database is made), closed in an `afterAll` after `beforeClose` (what must give way first: gates a failed
 * test left shut, a database left down).
 */
export function useTestApp(options: () => TestModuleOptions & TestAppOptions, beforeClose?: () => unknown): TestApp {
  return madeBeforeAll(
    () => startTestApp(options()),
    async (app) => {
      await beforeClose?.();
      await app.close();
    },
  );
}

/** The application context of `options` (no HTTP), initialised: for `IdempotencyService` and the store. */
export async function startTestContext(options: TestModuleOptions): Promise<TestContext> {
  const compiled = await compileTestModule(options);
  let context: INestApplicationContext;
  try {
    context = compiled.closing(await compiled.moduleRef.init());
  } catch (error) {
    await compiled.abandon();
    throw error;
  }
  return {
    context,
    moduleRef: compiled.moduleRef,
    logger: compiled.logger,
    redis: compiled.redis,
    close: () => context.close(),
  };
}

// The records on Redis.

interface OpenRedisRecords {
  module: DynamicModule;
  place: { client: Redis; keyPrefix: string };
  /** Deletes the records of a prefix of the app's own, and quits the client made for it; once. */
  end(): Promise<void>;
}

/** The store's module on the client of `records`, and a straight client of the helper's own to read and clean up. */
async function openRedisRecords(records: RedisRecords): Promise<OpenRedisRecords> {
  // Loaded only by the apps on Redis, so that the suites on PostgreSQL neither load ioredis nor look for Redis.
  const [{ IdempotencyRedisModule }, { newRedisClient }, { Redis }] = await Promise.all([
    import('../../src/redis/index.js'),
    import('./redis.js'),
    import('ioredis'),
  ]);
  const client = newRedisClient();
  const proxied = records.client === undefined && records.url !== undefined ? new Redis(records.url) : undefined;
  const made = proxied === undefined ? [client] : [client, proxied];
  // Their failures reach the commands that meet them (a test's, the store's); as events, unheard, ioredis prints them.
  for (const one of made) one.on('error', () => undefined);
  const ownPrefix = records.keyPrefix === undefined;
  const keyPrefix = records.keyPrefix ?? `test:${testFileTag()}:${randomBytes(4).toString('hex')}:`;
  let ended: Promise<void> | undefined;
  return {
    module: IdempotencyRedisModule.forRoot({
      client: records.client ?? proxied ?? client,
      keyPrefix,
      ...(records.outcomeWaits === undefined ? {} : { outcomeWaits: records.outcomeWaits }),
    }),
    place: { client, keyPrefix },
    end: () =>
      (ended ??= (async () => {
        // A record left behind (Redis gone at the end of the test) expires with its TTL.
        if (ownPrefix) await deleteRecords(client, keyPrefix).catch(() => undefined);
        for (const one of made) {
          // One that cannot reach Redis now (a proxy left down) would queue its QUIT until it could.
          if (one.status === 'ready') await one.quit().catch(() => one.disconnect());
          else one.disconnect();
        }
      })()),
  };
}

async function deleteRecords(client: Redis, keyPrefix: string): Promise<void> {
  const keys = await recordKeys(client, keyPrefix);
  if (keys.length > 0) await client.unlink(...keys);
}

/** The running test file's name, for the key prefixes of its apps: a key left behind says whose it is. */
function testFileTag(): string {
  const testPath = (globalThis as { expect?: { getState(): { testPath?: string } } }).expect?.getState().testPath;
  return testPath ? basename(testPath, '.spec.ts') : 'test';
}

/** The keys of the records under `keyPrefix` (`<prefix>{<digest>}`; the store's channel is no key). */
async function recordKeys(client: Redis, keyPrefix: string): Promise<string[]> {
  const pattern = `${keyPrefix.replace(/[*?[\]\\]/g, '\\$&')}{*}`;
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, found] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...found);
  } while (cursor !== '0');
  return keys;
}

// The stores of standard mode, which the suites that are not about transactional mode run on.

/**
 * The stores standard mode runs on, for `describeOnStores` (`test/support/on-each-store.ts`): PostgreSQL, and Redis
 * (standard mode only: the module refuses transactional handlers on it at start-up).
 */
export const STANDARD_STORES = ['postgres', 'redis'] as const;
export type StandardStore = (typeof STANDARD_STORES)[number];

/** The modes a store runs: transactional mode is PostgreSQL's alone. */
export function modesOn(store: StandardStore): ReadonlyArray<'standard' | 'transactional'> {
  return store === 'redis' ? ['standard'] : ['standard', 'transactional'];
}

/**
 * What puts an app's records on `store`, beside the spec's `database` (where its own tables are, on either store):
 * `{ ...recordsOn(store), database: db, ... }`. PostgreSQL's records are on that database.
 */
export function recordsOn(store: StandardStore, redis: RedisRecords = {}): { redis?: RedisRecords } {
  return store === 'redis' ? { redis } : {};
}

/** A record, as a test reads it from either store; its times in milliseconds since the epoch, on the store's clock. */
export interface RecordRead {
  account: string;
  endpoint: string;
  key: string;
  status: 'in_progress' | 'completed';
  /** The stored response's status; `null` before it is completed. */
  responseStatus: number | null;
  /** An attempt waits for its outcome (`inFlight: 'wait'`), and is told when it changes. */
  awaited: boolean;
  /** When it was created (first claimed). */
  createdAt: number;
  /** When its lease ends, renewed or not; `null` once completed. */
  leaseUntil: number | null;
  /** When it was read: its lease holds if it ends later. */
  readAt: number;
}

/**
 * The records of an app, read where its store keeps them, for the suites that run on each store: on PostgreSQL, the
 * records table of the file's database `db`; on Redis, the keys of the app's prefix. `db` is also where the spec's own
 * rows are (`work_log`), on either store.
 */
export interface TestRecords {
  readonly db: TestDatabase;
  /** Every record, by endpoint. */
  all(): Promise<RecordRead[]>;
  /** The record of `key` (the tests use each key in one scope), if there is one. */
  of(key: string): Promise<RecordRead | undefined>;
  statusOf(key: string): Promise<RecordRead['status'] | undefined>;
}

/**
 * The records of `app` (a test app, context or consumer), or of the app `app()` returns then: see `TestRecords`.
 * `app` is read at each look, so that it may be a block's app, made in its `beforeAll` (`useTestApp`'s).
 */
export function recordsOf(app: RecordsPlace | (() => RecordsPlace), db: TestDatabase): TestRecords {
  const all = async (key?: string): Promise<RecordRead[]> => {
    const redis = (typeof app === 'function' ? app() : app).redis;
    const records = redis === undefined ? await postgresRecords(db, key) : await redisRecords(redis);
    return records.filter((record) => key === undefined || record.key === key);
  };
  return {
    db,
    all: () => all(),
    of: async (key) => (await all(key))[0],
    statusOf: async (key) => (await all(key))[0]?.status,
  };
}

async function postgresRecords(db: TestDatabase, key: string | undefined): Promise<RecordRead[]> {
  const rows = await db.query<RecordRead>(
    `SELECT account, endpoint, idempotency_key AS key, status, response_status AS "responseStatus", awaited,
       (extract(epoch FROM created_at) * 1000)::float8 AS "createdAt",
       (extract(epoch FROM locked_until) * 1000)::float8 AS "leaseUntil",
       (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS "readAt"
     FROM idempotency_records WHERE $1::text IS NULL OR idempotency_key = $1 ORDER BY endpoint, account`,
    [key ?? null],
  );
  // A completed record keeps the end of its last lease in the table: none, as on Redis.
  return rows.map((row) => (row.status === 'completed' ? { ...row, leaseUntil: null } : row));
}

/** The records under the prefix, read as the store's scripts write them (`src/redis/record-scripts.ts`). */
async function redisRecords({ client, keyPrefix }: { client: Redis; keyPrefix: string }): Promise<RecordRead[]> {
  const keys = await recordKeys(client, keyPrefix);
  if (keys.length === 0) return [];
  const pipeline = client.pipeline().time();
  for (const key of keys) pipeline.hmget(key, 'a', 'e', 'k', 's', 'rs', 'w', 'l', 'x', 'c');
  const [[, time], ...replies] = (await pipeline.exec()) as Array<[Error | null, unknown]>;
  const [seconds, micros] = time as [string, string];
  const readAt = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const records: RecordRead[] = [];
  for (const [error, fields] of replies) {
    if (error) throw error;
    const [account, endpoint, key, status, responseStatus, awaited, leaseUntil, expires, created] = fields as Array<
      string | null
    >;
    // Gone (expired, released) since the scan.
    if (status === null || Number(expires) <= readAt) continue;
    records.push({
      account: account as string,
      endpoint: endpoint as string,
      key: key as string,
      status: status as RecordRead['status'],
      responseStatus: responseStatus === null ? null : Number(responseStatus),
      awaited: awaited === '1',
      createdAt: Number(created),
      leaseUntil: status === 'in_progress' ? Number(leaseUntil) : null,
      readAt,
    });
  }
  return records.sort((a, b) => a.endpoint.localeCompare(b.endpoint) || a.account.localeCompare(b.account));
}
