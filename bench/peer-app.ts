import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Idempotent, NodeIdempotencyModule, StorageAdapterEnum } from '@node-idempotency/nestjs';
import type { DataSource } from 'typeorm';
import { benchDatabase, type ChargeBody, insertCharge } from './bench-charges.js';
import { BenchCountersController } from './bench-counters.js';
import { BENCH_REDIS_URL } from './bench-redis.js';
import { serveBenchApp } from './bench-server.js';

/**
 * The peer bench app: the bench app's charge insert (same table, same database) guarded by the most used Nest
 * idempotency plugin, `@node-idempotency/nestjs`, whose records live in Redis (`BENCH_REDIS_URL`, default
 * redis://127.0.0.1:6379), not in PostgreSQL. On Express, Nest's default, or Fastify (`BENCH_PLATFORM`: its
 * interceptor answers on either). See bench/README.md.
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
        options: { url: BENCH_REDIS_URL, socket: { reconnectStrategy: false } },
      },
      // Each run's keys under a prefix of their own (BENCH_PEER_PREFIX), which the run deletes at its end; kept an hour
      // should it not get there.
      cacheKeyPrefix: process.env.BENCH_PEER_PREFIX ?? 'nest-idempotency-bench',
      cacheTTLMS: 60 * 60 * 1000,
    }),
  ],
  controllers: [PeerController, BenchCountersController],
})
class PeerModule {}

// Without `rawBody`, which the peer does not need (it hashes the parsed body): as an application on it runs.
serveBenchApp(PeerModule, 'peer bench app');
