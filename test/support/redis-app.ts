import type { INestApplication, ModuleMetadata, Type } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { IdempotencyModule, type IdempotencyModuleOptions } from '../../src/index.js';
import { type IdempotencyRedisOptions, IdempotencyRedisModule } from '../../src/redis/index.js';
import { RecordingLogger } from './recording-logger.js';

/** An application of a test on the Redis store, listening on a free loopback port (`url`). */
export interface RedisTestApp {
  app: INestApplication;
  moduleRef: TestingModule;
  url: string;
  logger: RecordingLogger;
  close(): Promise<void>;
}

export interface RedisTestAppOptions {
  /**
   * The store's options: the spec's client (it stays the spec's to close, after the application) and a `keyPrefix` of
   * the test file's own, so that its records are its own.
   */
  redis: IdempotencyRedisOptions & { keyPrefix: string };
  idempotency?: IdempotencyModuleOptions;
  controllers?: Type[];
  /** More modules, after the idempotency module. */
  imports?: ModuleMetadata['imports'];
}

/**
 * The application of `options` on `IdempotencyRedisModule.forRoot(options.redis)`, on Express,
 * logging into a `RecordingLogger`: what `startTestApp` (test-app.ts) is to PostgreSQL and the in-memory store.
 */
export async function startRedisApp(options: RedisTestAppOptions): Promise<RedisTestApp> {
  const logger = new RecordingLogger();
  const store = IdempotencyRedisModule.forRoot(options.redis);
  const moduleRef = await Test.createTestingModule({
    imports: [IdempotencyModule.forRoot({ store, ...options.idempotency }), ...(options.imports ?? [])],
    controllers: options.controllers,
  })
    .setLogger(logger)
    .compile();
  const app = moduleRef.createNestApplication({ rawBody: true, logger });
  await app.listen(0, '127.0.0.1');
  return { app, moduleRef, url: await app.getUrl(), logger, close: () => app.close() };
}
