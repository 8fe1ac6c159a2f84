import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule } from '../src/index.js';
import { IdempotencyPostgresModule, PostgresIdempotencyContext } from '../src/postgres/index.js';
import { PLATFORMS, type Platform } from '../test/support/platforms.js';
import { benchDatabase, type ChargeBody, insertCharge } from './bench-charges.js';
import { BenchCountersController } from './bench-counters.js';

/** The same charge insert behind three routes: without the module, in standard mode, in transactional mode. */
@Controller('bench')
class BenchController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {}

  @Post('baseline')
  baseline(@Body() body: ChargeBody) {
    return this.insert(body);
  }

  @Post('standard')
  @Idempotent()
  standard(@Body() body: ChargeBody) {
    return this.insert(body);
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  transactional(@Body() body: ChargeBody) {
    return this.insert(body);
  }

  private insert(body: ChargeBody) {
    return insertCharge(this.idempotency.manager ?? this.dataSource.manager, body);
  }
}

@Module({
  imports: [
    benchDatabase(),
    IdempotencyModule.forRoot({
      // BENCH_TRANSACTION_POOLER=on: DATABASE_URL goes through PgBouncer in transaction mode (the rows through it).
      // BENCH_BATCHING=off: a statement per request, as before coalesced statements.
      store: IdempotencyPostgresModule.forRoot({
        transactionPooler: process.env.BENCH_TRANSACTION_POOLER === 'on',
        ...(process.env.BENCH_BATCHING === 'off' ? { batching: false as const } : {}),
      }),
      accountResolver: () => 'bench',
      // BENCH_REPLAY_CACHE=off: every replay reads the database, as on an instance that has not seen the key.
      ...(process.env.BENCH_REPLAY_CACHE === 'off' ? { replayCache: false as const } : {}),
    }),
  ],
  controllers: [BenchController, BenchCountersController],
})
class BenchModule {}

/** BENCH_PLATFORM: the HTTP platform the app runs on, Nest's default Express (the default) or Fastify. */
function platformFromEnv(): Platform {
  const raw = process.env.BENCH_PLATFORM || 'express';
  if (!(PLATFORMS as readonly string[]).includes(raw))
    throw new Error(`BENCH_PLATFORM must be one of ${PLATFORMS.join(', ')}, got ${JSON.stringify(raw)}`);
  return raw as Platform;
}

/** The bench app, in a process of its own so that the load generator does not share its event loop. */
async function main(): Promise<void> {
  // The fingerprint hashes the body bytes as received: `rawBody: true` on either platform.
  const options = { rawBody: true, logger: ['error' as const] };
  const app =
    platformFromEnv() === 'fastify'
      ? await NestFactory.create(BenchModule, new FastifyAdapter(), options)
      : await NestFactory.create(BenchModule, options);
  await app.listen(0, '127.0.0.1');
  console.log(`bench app listening on port ${new URL(await app.getUrl()).port}`);
  const stop = () => void app.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
