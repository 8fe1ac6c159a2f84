import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Redis } from 'ioredis';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyModule } from '../src/index.js';
import { IdempotencyPostgresModule, PostgresIdempotencyContext } from '../src/postgres/index.js';
import { IdempotencyRedisModule } from '../src/redis/index.js';
import { benchDatabase, type ChargeBody, insertCharge } from './bench-charges.js';
import { BENCH_ROUND_TRIPS, BenchCountersController } from './bench-counters.js';
import { BENCH_REDIS_URL } from './bench-redis.js';
import { serveBenchApp } from './bench-server.js';

/** The same charge insert without the module and in standard mode: the routes of the app on either store. */
@Controller('bench')
class StandardBenchController {
  constructor(
    @InjectDataSource() protected readonly dataSource: DataSource,
    private readonly context: IdempotencyContext,
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

  /** What a step costs: three inserts, one after another, against the same in three steps (`stepped`). */
  @Post('unstepped')
  @Idempotent()
  async unstepped(@Body() body: ChargeBody) {
    const charges = [];
    for (let part = 0; part < 3; part += 1) charges.push(await this.insert(body));
    return charges;
  }

  /**
   * Each insert a step; on PostgreSQL committed with its recovery point, as docs/steps.md says a step that writes is.
   */
  @Post('stepped')
  @Idempotent()
  stepped(@Body() body: ChargeBody) {
    return this.inSteps(body, !ON_REDIS);
  }

  /**
   * Each insert a step recorded after it, on its own: what recording a step costs, without a transaction of its own.
   */
  @Post('stepped-plain')
  @Idempotent()
  steppedPlain(@Body() body: ChargeBody) {
    return this.inSteps(body, false);
  }

  private async inSteps(body: ChargeBody, transactional: boolean) {
    const charges = [];
    for (const step of ['first', 'second', 'third']) {
      charges.push(await this.context.step(step, () => this.insert(body), { transactional }));
    }
    return charges;
  }

  protected insert(body: ChargeBody) {
    return insertCharge(this.dataSource.manager, body);
  }
}

/** On PostgreSQL, a third route, in transactional mode: the insert through the run's transaction. */
@Controller('bench')
class PostgresBenchController extends StandardBenchController {
  constructor(
    @InjectDataSource() dataSource: DataSource,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {
    super(dataSource, idempotency);
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  transactional(@Body() body: ChargeBody) {
    return this.insert(body);
  }

  // Every route of it, as before the Redis store had its app: the PostgreSQL rows measure the same code as ever.
  protected override insert(body: ChargeBody) {
    return insertCharge(this.idempotency.manager ?? this.dataSource.manager, body);
  }
}

/**
 * BENCH_STORE: where the records live, `postgres` (the default: the database of the charges) or `redis` (the Redis at
 * BENCH_REDIS_URL, the keys under BENCH_REDIS_PREFIX; standard mode only, the store refusing transactional handlers,
 * so the app has no transactional route). The charges are in PostgreSQL either way, as the peer app's.
 */
function storeFromEnv(): 'postgres' | 'redis' {
  const raw = process.env.BENCH_STORE || 'postgres';
  if (raw !== 'postgres' && raw !== 'redis')
    throw new Error(`BENCH_STORE must be postgres or redis, got ${JSON.stringify(raw)}`);
  return raw;
}
const ON_REDIS = storeFromEnv() === 'redis';
/** Every key of the app's under a prefix of its run's own (`newRedisPrefix()`), which the run deletes at its end. */
const REDIS_PREFIX = process.env.BENCH_REDIS_PREFIX;
if (ON_REDIS && !REDIS_PREFIX)
  throw new Error('BENCH_STORE=redis needs BENCH_REDIS_PREFIX: the keys under a prefix that the bench deletes after');

/**
 * The application's client, as an application on the Redis store makes it, with auto-pipelining: the commands that
 * concurrent requests send in one tick of the event loop then leave in one write to the socket. Without it ioredis
 * writes each command as it is called, a system call each; the peer's client (node-redis 4) corks its socket until
 * the next `setImmediate` by default, so that both apps would otherwise not be measured on the same terms. One
 * connection, as the peer's. Not retrying for ever, so that an app whose Redis is gone fails at start (as the peer's).
 */
const redis = ON_REDIS
  ? new Redis(BENCH_REDIS_URL, {
      enableAutoPipelining: true,
      retryStrategy: () => null,
    })
  : undefined;

/**
 * The commands the store sends on the client (each script one EVALSHA, or an EVAL when the server lacks it), for the
 * `trips/req` column: the Redis store keeps no count of its own. Each is one round trip, or a share of one when
 * auto-pipelining sends it with others.
 */
function countedCommands(client: Redis): { statementsSent: number } {
  const count = { statementsSent: 0 };
  // The store sends its scripts with these (ioredis has them on every client, though its types omit them).
  const commands = client as unknown as Record<'evalshaBuffer' | 'evalBuffer', (...args: unknown[]) => unknown>;
  for (const name of ['evalshaBuffer', 'evalBuffer'] as const) {
    const send = commands[name].bind(client);
    commands[name] = (...args: unknown[]) => {
      count.statementsSent += 1;
      return send(...args);
    };
  }
  return count;
}

@Module({
  imports: [
    benchDatabase(),
    IdempotencyModule.forRoot({
      // BENCH_TRANSACTION_POOLER=on: DATABASE_URL goes through PgBouncer in transaction mode (the rows through it).
      // BENCH_BATCHING=off: a statement per request, as before coalesced statements.
      store: redis
        ? IdempotencyRedisModule.forRoot({ client: redis, keyPrefix: REDIS_PREFIX })
        : IdempotencyPostgresModule.forRoot({
            transactionPooler: process.env.BENCH_TRANSACTION_POOLER === 'on',
            ...(process.env.BENCH_BATCHING === 'off' ? { batching: false as const } : {}),
          }),
      accountResolver: () => 'bench',
      // BENCH_REPLAY_CACHE=off: every replay reads the store, as on an instance that has not seen the key.
      ...(process.env.BENCH_REPLAY_CACHE === 'off' ? { replayCache: false as const } : {}),
    }),
  ],
  controllers: [redis ? StandardBenchController : PostgresBenchController, BenchCountersController],
  providers: redis ? [{ provide: BENCH_ROUND_TRIPS, useValue: countedCommands(redis) }] : [],
})
class BenchModule {}

// The fingerprint hashes the body bytes as received: `rawBody: true` on either platform. The client is the app's to
// close, after the module's shutdown, which still uses it.
serveBenchApp(BenchModule, 'bench app', { rawBody: true }, async () => redis?.quit());
