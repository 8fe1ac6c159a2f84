import 'reflect-metadata';
import { setTimeout as delay } from 'node:timers/promises';
import { Controller, type DynamicModule, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyModule } from '../../src/index.js';
import { IdempotencyPostgresModule } from '../../src/postgres/index.js';

/**
 * An instance of a fleet that a rolling deploy replaces one at a time (test/support/rolling-fleet.ts), in a process
 * of its own, stopped the way a deploy does (SIGTERM, shutdown hooks enabled). Its one route, `POST /work`, is
 * `@Idempotent({ inFlight: 'wait' })`: its handler takes `HANDLER_MS` (default 100), writes a row of work_log (the
 * fleet's `ROLLING_WORK_LOG`) on the app's data source, outside any idempotency transaction (standard mode), and
 * answers 201 `{ key, pid }`. The records' store is `STORE`'s: `postgres` (the default: DATABASE_URL through a
 * transaction pooler, `transactionPooler: true`, a pool of `POOL_MAX`) or `redis-cluster` (REDIS_CLUSTER_NODES,
 * `host:port,host:port`; work_log stays on DATABASE_URL, where the test counts the runs). It migrates nothing: the
 * test does, once, before the fleet starts. It prints `listening on port N` once it serves.
 */
const env = process.env;
const handlerMs = Number(env.HANDLER_MS ?? 100);

@Controller()
class WorkController {
  constructor(
    private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Idempotent({ inFlight: 'wait' })
  @Post('work')
  async work(): Promise<{ key: string; pid: number }> {
    await delay(handlerMs);
    const key = this.idempotency.run?.scope.key as string;
    await this.dataSource.query('INSERT INTO work_log (key, pid) VALUES ($1, $2)', [key, process.pid]);
    return { key, pid: process.pid };
  }
}

async function store(): Promise<DynamicModule> {
  if (env.STORE === 'redis-cluster') {
    // Imported here only: the PostgreSQL instances never load ioredis nor the Redis store.
    const [{ Cluster }, { IdempotencyRedisModule }] = await Promise.all([
      import('ioredis'),
      import('../../src/redis/index.js'),
    ]);
    const nodes = (env.REDIS_CLUSTER_NODES ?? '').split(',').map((node) => {
      const [host, port] = node.split(':');
      return { host, port: Number(port) };
    });
    return IdempotencyRedisModule.forRoot({ client: new Cluster(nodes) });
  }
  return IdempotencyPostgresModule.forRoot({ transactionPooler: true });
}

@Module({})
class RollingAppModule {
  static forRoot(store: DynamicModule): DynamicModule {
    return {
      module: RollingAppModule,
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: env.DATABASE_URL, extra: { max: Number(env.POOL_MAX ?? 4) } }),
        IdempotencyModule.forRoot({
          store,
          singleTenant: true,
          // A refused request's client comes back after Retry-After: a second rather than two keeps the test short.
          retryAfterSeconds: 1,
        }),
      ],
      controllers: [WorkController],
    };
  }
}

async function main(): Promise<void> {
  const app = await NestFactory.create(RollingAppModule.forRoot(await store()), {
    logger: ['warn', 'error'],
    rawBody: true,
  });
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  console.log(`rolling app ${process.pid} listening on port ${new URL(await app.getUrl()).port}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
