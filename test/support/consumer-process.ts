import 'reflect-metadata';
import { setTimeout as delay } from 'node:timers/promises';
import { Controller, type INestApplicationContext, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, type MicroserviceOptions, Payload, ServerRMQ } from '@nestjs/microservices';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyModule } from '../../src/index.js';
import { IdempotencyJetStreamModule, JetStreamServer } from '../../src/jetstream/index.js';
import {
  idempotencyMigrations,
  IdempotencyPostgresModule,
  PostgresIdempotencyContext,
} from '../../src/postgres/index.js';
import { IdempotencyRabbitMQModule } from '../../src/rabbitmq/index.js';

/**
 * A consumer application in a process of its own, built as the docs show (docs/rabbitmq.md, docs/jetstream.md), for
 * the tests that stop it the way a deploy does (SIGTERM, shutdown hooks enabled). Its one `@Idempotent()` event
 * handler, on the pattern `work`, takes `HANDLER_MS` and writes a row in work_log with the message's key. From the
 * environment: `BROKER` (`rabbitmq` or `jetstream`), `HYBRID` (`true`: an HTTP application with the microservice
 * connected, `inheritAppConfig: true`), `DATABASE_URL`, `TRANSACTIONAL`; RabbitMQ's `RABBITMQ_URL`, `QUEUE` and
 * `QUEUE_ARGUMENTS` (JSON); JetStream's `NATS_URL`, `STREAM` and `SUBJECT` (the handler's pattern is then the
 * subject). It prints `listening on port N` once it consumes (N is 0 without HTTP).
 */
const env = process.env;
const handlerMs = Number(env.HANDLER_MS ?? 200);
const pattern = env.BROKER === 'jetstream' ? (env.SUBJECT as string) : 'work';

@Controller()
class WorkConsumer {
  constructor(
    private readonly dataSource: DataSource,
    private readonly postgres: PostgresIdempotencyContext,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Idempotent()
  @EventPattern(pattern)
  async work(@Payload() _payload: unknown): Promise<void> {
    await delay(handlerMs);
    const manager = this.postgres.manager ?? this.dataSource.manager;
    await manager.query('INSERT INTO work_log (key) VALUES ($1)', [this.idempotency.run?.scope.key]);
  }
}

const brokerModule =
  env.BROKER === 'jetstream' ? IdempotencyJetStreamModule.forRoot() : IdempotencyRabbitMQModule.forRoot();

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: env.DATABASE_URL,
      migrations: idempotencyMigrations(),
      migrationsRun: true,
    }),
    IdempotencyModule.forRoot({
      store: IdempotencyPostgresModule.forRoot(),
      singleTenant: true,
      transactional: env.TRANSACTIONAL === 'true',
    }),
    brokerModule,
  ],
  controllers: [WorkConsumer],
})
class ConsumerModule {}

function server(): MicroserviceOptions {
  if (env.BROKER === 'jetstream') {
    const strategy = new JetStreamServer({
      servers: env.NATS_URL,
      stream: env.STREAM as string,
      durable: 'work',
      subjects: [pattern],
      provision: 'consumer',
      maxDeliver: 5,
    });
    return { strategy };
  }
  const strategy = new ServerRMQ({
    urls: [env.RABBITMQ_URL as string],
    queue: env.QUEUE,
    queueOptions: { durable: true, arguments: JSON.parse(env.QUEUE_ARGUMENTS ?? '{}') as Record<string, unknown> },
    noAck: false,
    prefetchCount: 10,
  });
  return { strategy };
}

async function main(): Promise<void> {
  let app: INestApplicationContext;
  let port = 0;
  if (env.HYBRID === 'true') {
    const http = await NestFactory.create(ConsumerModule, { logger: ['log', 'warn', 'error'] });
    http.connectMicroservice<MicroserviceOptions>(server(), { inheritAppConfig: true });
    http.enableShutdownHooks();
    await http.startAllMicroservices();
    await http.listen(0, '127.0.0.1');
    port = Number(new URL(await http.getUrl()).port);
    app = http;
  } else {
    const microservice = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
      ...server(),
      logger: ['log', 'warn', 'error'],
    });
    microservice.enableShutdownHooks();
    await microservice.listen();
    app = microservice;
  }
  void app;
  console.log(`consumer listening on port ${port}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
