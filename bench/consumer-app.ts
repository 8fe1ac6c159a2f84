import 'reflect-metadata';
import { createServer } from 'node:http';
import { performance } from 'node:perf_hooks';
import { type CanActivate, Controller, type ExecutionContext, Injectable, Module, UseGuards } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Ctx, EventPattern, type MicroserviceOptions, Payload, RmqContext, Transport } from '@nestjs/microservices';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule } from '../src/index.js';
import { IdempotencyPostgresModule, PostgresIdempotencyContext } from '../src/postgres/index.js';
import { IdempotencyRabbitMQModule } from '../src/rabbitmq/index.js';
import { benchDatabase, type ChargeBody, insertCharge } from './bench-charges.js';

/**
 * The consumer bench app: the bench's charge insert behind three event handlers of Nest's RabbitMQ server
 * (`noAck: false`, prefetch `BENCH_PREFETCH`, the quorum queue `BENCH_QUEUE`): `bench.baseline` acknowledges the
 * message itself after the insert, `bench.standard` and `bench.transactional` are `@Idempotent()` and leave the
 * acknowledgement to the module. Deliveries wait at a gate (a guard, before the module's interceptor) until the
 * bench, which has published a batch meanwhile, asks for a run (`POST /run?messages=N` on a control port): the gate
 * opens, and the answer is the time from then until N messages were settled, and each message's time from the gate
 * (or its delivery, if later) to its settlement. The gate closes again after the run.
 */

interface AmqpMessage {
  properties: Record<string, unknown>;
}
interface AmqpChannel {
  ack(message: AmqpMessage, ...rest: unknown[]): void;
  nack(message: AmqpMessage, allUpTo?: boolean, requeue?: boolean): void;
}

export interface ConsumerRun {
  seconds: number;
  /** Each settled message's time from the gate (or its delivery) to its acknowledgement or rejection, in ms. */
  p50: number;
  p99: number;
  max: number;
  acknowledged: number;
  rejected: number;
  /** Messages given back (nack with requeue): redelivered, and counted once settled. */
  requeued: number;
}

interface Run {
  target: number;
  latencies: number[];
  rejected: number;
  requeued: number;
  done: () => void;
}

/** The gate, and the settlements of the run in progress. */
class Meter {
  private open: Promise<void>;
  private opened: () => void = () => undefined;
  private startedAt = 0;
  private readonly entered = new WeakMap<AmqpMessage, number>();
  private readonly wrapped = new WeakSet<AmqpChannel>();
  private run?: Run;

  constructor() {
    this.open = this.closed();
  }

  /** A delivery passes once a run has opened the gate. */
  async enter(message: AmqpMessage, channel: AmqpChannel): Promise<void> {
    this.watch(channel);
    await this.open;
    this.entered.set(message, Math.max(performance.now(), this.startedAt));
  }

  async measure(messages: number): Promise<ConsumerRun> {
    if (this.run) throw new Error('a run is in progress');
    const run: Run = { target: messages, latencies: [], rejected: 0, requeued: 0, done: () => undefined };
    const finished = new Promise<void>((done) => {
      run.done = done;
    });
    this.run = run;
    this.startedAt = performance.now();
    this.opened();
    await finished;
    const seconds = (performance.now() - this.startedAt) / 1000;
    this.run = undefined;
    this.open = this.closed();
    const sorted = run.latencies.sort((a, b) => a - b);
    const at = (share: number) => sorted[Math.min(sorted.length - 1, Math.floor(share * sorted.length))];
    return {
      seconds,
      p50: at(0.5),
      p99: at(0.99),
      max: sorted[sorted.length - 1],
      acknowledged: sorted.length - run.rejected,
      rejected: run.rejected,
      requeued: run.requeued,
    };
  }

  private closed(): Promise<void> {
    return new Promise((resolve) => {
      this.opened = resolve;
    });
  }

  /** Counts what the channel settles, whoever settles it (the handler or the module). */
  private watch(channel: AmqpChannel): void {
    if (this.wrapped.has(channel)) return;
    this.wrapped.add(channel);
    const [ack, nack] = [channel.ack.bind(channel), channel.nack.bind(channel)];
    channel.ack = (message, ...rest) => {
      ack(message, ...rest);
      this.settled(message, false);
    };
    channel.nack = (message, allUpTo, requeue = true) => {
      nack(message, allUpTo, requeue);
      if (requeue && this.run) this.run.requeued += 1;
      else this.settled(message, true);
    };
  }

  private settled(message: AmqpMessage, rejected: boolean): void {
    const { run } = this;
    const entered = this.entered.get(message);
    if (!run || entered === undefined) return;
    run.latencies.push(performance.now() - entered);
    if (rejected) run.rejected += 1;
    if (run.latencies.length === run.target) run.done();
  }
}

const meter = new Meter();

@Injectable()
class Gate implements CanActivate {
  async canActivate(context: ExecutionContext): Promise<boolean> {
    const rmq = context.switchToRpc().getContext<RmqContext>();
    await meter.enter(rmq.getMessage() as AmqpMessage, rmq.getChannelRef() as AmqpChannel);
    return true;
  }
}

@Controller()
@UseGuards(Gate)
class BenchConsumer {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {}

  /** Without the module: the insert, then the handler acknowledges the message itself. */
  @EventPattern('bench.baseline')
  async baseline(@Payload() body: ChargeBody, @Ctx() context: unknown): Promise<void> {
    await this.insert(body);
    const rmq = context as RmqContext;
    (rmq.getChannelRef() as AmqpChannel).ack(rmq.getMessage() as AmqpMessage);
  }

  @Idempotent()
  @EventPattern('bench.standard')
  async standard(@Payload() body: ChargeBody): Promise<void> {
    await this.insert(body);
  }

  @Idempotent({ transactional: true })
  @EventPattern('bench.transactional')
  async transactional(@Payload() body: ChargeBody): Promise<void> {
    await this.insert(body);
  }

  private insert(body: ChargeBody) {
    return insertCharge(this.idempotency.manager ?? this.dataSource.manager, body);
  }
}

@Module({
  imports: [
    benchDatabase(),
    IdempotencyModule.forRoot({ store: IdempotencyPostgresModule.forRoot(), accountResolver: () => 'bench' }),
    IdempotencyRabbitMQModule.forRoot(),
  ],
  controllers: [BenchConsumer],
})
class ConsumerModule {}

async function main(): Promise<void> {
  const queue = process.env.BENCH_QUEUE;
  if (!queue) throw new Error('BENCH_QUEUE must name the queue to consume');
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(ConsumerModule, {
    transport: Transport.RMQ,
    options: {
      urls: [process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672'],
      queue,
      queueOptions: { durable: true, arguments: { 'x-queue-type': 'quorum' } },
      noAck: false,
      prefetchCount: Number(process.env.BENCH_PREFETCH ?? 64),
    },
    logger: ['error'],
  });
  await app.listen();
  const control = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    const messages = Number(url.searchParams.get('messages'));
    if (request.method !== 'POST' || url.pathname !== '/run' || !Number.isInteger(messages) || messages < 1) {
      response.writeHead(404).end();
      return;
    }
    meter.measure(messages).then(
      (run) => response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(run)),
      (error: Error) => response.writeHead(409).end(error.message),
    );
  });
  control.listen(0, '127.0.0.1', () => {
    const address = control.address();
    console.log(`consumer bench app listening on port ${typeof address === 'object' ? address?.port : address}`);
  });
  const stop = () => {
    control.close();
    void app.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
