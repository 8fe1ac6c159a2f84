import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { InjectDataSource } from '@nestjs/typeorm';
import { Idempotent, NodeIdempotencyModule, StorageAdapterEnum } from '@node-idempotency/nestjs';
import type { DataSource } from 'typeorm';
import { benchDatabase, type ChargeBody, insertCharge } from './bench-charges.js';
import { BenchCountersController } from './bench-counters.js';

/**
 * The peer bench app: the bench app's charge insert (same table, same database) guarded by the most used Nest
 * idempotency plugin, `@node-idempotency/nestjs`, whose records live in Redis (`BENCH_REDIS_URL`, default
 * redis://127.0.0.1:6379), not in PostgreSQL. On Express, Nest's default. See bench/README.md.
 */
@Controller('bench')
class PeerController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('peer')
  @Idempotent()
  peer(@Body() body: ChargeBody) {
    return insertCharge(this.dataSource.manager, body);
  }
}

@Module({
  imports: [
    benchDatabase(),
    NodeIdempotencyModule.forRootAsync({
      storage: {
        adapter: StorageAdapterEnum.redis,
        // Fail at start rather than retry for ever when Redis is gone.
        options: { url: process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379', socket: { reconnectStrategy: false } },
      },
      // Each run's keys under a prefix of their own (BENCH_PEER_PREFIX), kept an hour: runs do not see each other's.
      cacheKeyPrefix: process.env.BENCH_PEER_PREFIX ?? 'nest-idempotency-bench',
      cacheTTLMS: 60 * 60 * 1000,
    }),
  ],
  controllers: [PeerController, BenchCountersController],
})
class PeerModule {}

async function main(): Promise<void> {
  const app = await NestFactory.create(PeerModule, { logger: ['error' as const] });
  await app.listen(0, '127.0.0.1');
  console.log(`peer bench app listening on port ${new URL(await app.getUrl()).port}`);
  const stop = () => void app.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
