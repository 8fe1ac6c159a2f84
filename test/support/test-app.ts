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

/**
 * One way to build the Nest application (or application context) of a test: the module on the PostgreSQL store of
 * the test file's database (its migrations run) or on the in-memory store, the spec's controllers and providers, on
 * Express or Fastify with `rawBody: true`, logging into a `RecordingLogger`. A spec names only what it tests.
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
}

/** `IdempotencyModule.forRoot(options)`, or `forRootAsync(options)`; the store is given by the helper. */
export type ModuleRegistration =
  | { idempotency: IdempotencyModuleOptions; idempotencyAsync?: never }
  | { idempotencyAsync: Omit<Parameters<typeof IdempotencyModule.forRootAsync>[0], 'store'>; idempotency?: never };

export type TestModuleOptions = (OnPostgres | InMemory) &
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

export interface TestApp {
  app: INestApplication;
  moduleRef: TestingModule;
  /** Where the application listens (`http://127.0.0.1:port`); started with `listen: false`, it throws. */
  readonly url: string;
  logger: RecordingLogger;
  close(): Promise<void>;
}

export interface TestContext {
  context: INestApplicationContext;
  moduleRef: TestingModule;
  logger: RecordingLogger;
  close(): Promise<void>;
}

/** Compiles the testing module of `options`: what `startTestApp` and `startTestContext` start. */
export async function compileTestModule(
  options: TestModuleOptions,
): Promise<{ moduleRef: TestingModule; logger: RecordingLogger }> {
  const logger = options.logger ?? new RecordingLogger();
  const store =
    options.database === 'memory'
      ? (options.store ?? new InMemoryIdempotencyStore())
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
  if (options.database !== 'memory' && options.overrideStore) {
    builder = builder.overrideProvider(IDEMPOTENCY_STORE).useFactory({
      factory: options.overrideStore,
      inject: [getDataSourceToken(options.dataSourceName)],
    });
  }
  return { moduleRef: await builder.setLogger(logger).compile(), logger };
}

function databaseModules(options: TestModuleOptions): DynamicModule[] {
  if (options.database === 'memory') return [];
  const { database, dataSourceName, pool, entities, migrations, features } = options;
  return [
    TypeOrmModule.forRoot({
      ...(dataSourceName === undefined ? {} : { name: dataSourceName }),
      type: 'postgres',
      url: database.url,
      ...(entities === undefined ? {} : { entities }),
      migrations: [...idempotencyMigrations(), ...(migrations ?? [])],
      migrationsRun: true,
      ...(pool === undefined ? {} : { extra: pool }),
    }),
    ...(features === undefined ? [] : [TypeOrmModule.forFeature(features, dataSourceName)]),
  ];
}

/** The application of `options`, started: listening on a free loopback port unless `listen: false`. */
export async function startTestApp(options: TestModuleOptions & TestAppOptions): Promise<TestApp> {
  const { moduleRef, logger } = await compileTestModule(options);
  const platform = options.platform ?? 'express';
  const app = createPlatformApp(moduleRef, platform, { rawBody: true, logger, ...options.appOptions }, options.fastify);
  await options.configure?.(app);
  let url: string | undefined;
  if (options.listen ?? true) {
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  } else {
    await app.init();
    if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
  }
  return {
    app,
    moduleRef,
    logger,
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
  const { moduleRef, logger } = await compileTestModule(options);
  const context = await moduleRef.init();
  return { context, moduleRef, logger, close: () => context.close() };
}
