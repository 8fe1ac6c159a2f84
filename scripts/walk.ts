import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, type MicroserviceOptions, Payload, Transport } from '@nestjs/microservices';
import { TypeOrmModule } from '@nestjs/typeorm';
import amqp from 'amqplib';
import { Idempotent, IdempotencyModule, InMemoryIdempotencyStore } from '../src/index.js';
import { idempotencyMigrations, IdempotencyPostgresModule } from '../src/postgres/index.js';
import { IdempotencyRabbitMQModule } from '../src/rabbitmq/index.js';
import type { Entry, WalkReport } from './walk-report.js';

/**
 * `npm run walk`: the files one HTTP request enters from the interceptor to the store's claim, and one RabbitMQ
 * message from its receipt to its acknowledgement, in order, each entry with the file it came from. A file is entered
 * when a function of it is called from another file (or from Nest, rxjs, a timer): a call within a file, a return and
 * a resumption after `await` are not entries. Run through `scripts/walk-hooks.mjs`, which puts a probe at the top of
 * every function of src/. On PostgreSQL at `DATABASE_URL` (the in-memory store without it), RabbitMQ at
 * `RABBITMQ_URL` (the message's walk is skipped, saying why, without it). `--json` prints the walks as JSON.
 */

const LIBRARY = fileURLToPath(new URL('../src/', import.meta.url));
const DATABASE_URL = process.env.DATABASE_URL;
const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const QUEUE = `idempotency_walk_${randomUUID()}`;

/** A walk being recorded: from the first entry `begins` accepts to the first `ends` accepts, both included. */
class Walk {
  readonly entries: Entry[] = [];
  private recording = false;
  private ended = false;
  private finish!: () => void;
  readonly finished = new Promise<void>((resolve) => (this.finish = resolve));

  constructor(
    private readonly begins: (entry: Entry) => boolean,
    private readonly ends: (entry: Entry) => boolean,
  ) {}

  enter(entry: Entry): void {
    if (this.ended || (!this.recording && !this.begins(entry))) return;
    this.recording = true;
    this.entries.push(entry);
    if (this.ends(entry)) {
      this.ended = true;
      this.finish();
    }
  }

  report(): WalkReport {
    const seen = new Set<string>();
    let reentries = 0;
    for (const { file } of this.entries) {
      if (seen.has(file)) reentries += 1;
      seen.add(file);
    }
    return { entries: this.entries, files: seen.size, reentries };
  }
}

let walk: Walk | undefined;

/**
 * The probe every function of src/ calls first: an entry when its caller is in another file. Not entries: a function
 * a built-in calls for code of the same file (an array's callback, a promise's executor), one run from the microtask
 * queue with no caller (a resumption, as after `await`), and an inline function called back while the function that
 * holds it still runs (the callback of a span): the reader is still in that file.
 */
function probe(): void {
  if (!walk) return;
  const [callee, ...below] = callSites();
  const file = libraryFile(callee?.getFileName());
  if (!callee || !file) return;
  const callers = below.filter((site) => site.getFileName());
  if (callers.length === 0) return;
  const from = libraryFile(callers[0].getFileName()) ?? packageOf(callers[0].getFileName());
  if (from === file) return;
  if (!callee.getFunctionName() && callers.some((site) => libraryFile(site.getFileName()) === file)) return;
  const type = callee.getTypeName();
  const name = callee.getFunctionName() ?? '(anonymous)';
  walk.enter({ file, fn: type && type !== 'Object' && !name.includes('.') ? `${type}.${name}` : name, from });
}
(globalThis as { __idempotencyWalk?: () => void }).__idempotencyWalk = probe;

/** The stack below the probe: the probed function first, then its caller. */
function callSites(): NodeJS.CallSite[] {
  // Node's own (source maps) is put back as it was, whatever it is.
  const prepare = Object.getOwnPropertyDescriptor(Error, 'prepareStackTrace');
  Error.prepareStackTrace = (_, sites) => sites;
  try {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 50;
    const holder: { stack?: NodeJS.CallSite[] } = {};
    Error.captureStackTrace(holder, probe);
    Error.stackTraceLimit = limit;
    return holder.stack ?? [];
  } finally {
    if (prepare) Object.defineProperty(Error, 'prepareStackTrace', prepare);
    else Reflect.deleteProperty(Error, 'prepareStackTrace');
  }
}

function libraryFile(fileName: string | null | undefined): string | undefined {
  const path = fileName?.startsWith('file:') ? fileURLToPath(fileName) : fileName;
  return path?.startsWith(LIBRARY) ? path.slice(LIBRARY.length) : undefined;
}

function packageOf(fileName: string | null | undefined): string {
  if (!fileName) return '(native)';
  if (fileName.startsWith('node:')) return 'node';
  const parts = fileName.split('/node_modules/').pop()?.split('/') ?? [];
  if (!fileName.includes('/node_modules/')) return fileName;
  return parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] ?? fileName);
}

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent()
  charge(@Body() body: { amount: number }) {
    return { charged: body.amount };
  }
}

@Controller()
class PayoutsConsumer {
  @Idempotent()
  @EventPattern('payout')
  payout(@Payload() _payout: unknown) {}
}

const rabbitmqReachable = await amqp.connect(RABBITMQ_URL, { timeout: 3_000 }).then(
  async (connection) => {
    await connection.close();
    return true;
  },
  () => false,
);

@Module({
  imports: [
    ...(DATABASE_URL
      ? [
          TypeOrmModule.forRoot({
            type: 'postgres',
            url: DATABASE_URL,
            migrations: idempotencyMigrations(),
            migrationsRun: true,
          }),
        ]
      : []),
    IdempotencyModule.forRoot({
      store: DATABASE_URL ? IdempotencyPostgresModule.forRoot() : new InMemoryIdempotencyStore(),
      singleTenant: true,
    }),
    ...(rabbitmqReachable ? [IdempotencyRabbitMQModule.forRoot()] : []),
  ],
  controllers: [ChargesController, ...(rabbitmqReachable ? [PayoutsConsumer] : [])],
})
class WalkModule {}

const app = await NestFactory.create(WalkModule, { rawBody: true, logger: ['error', 'warn'] });
if (rabbitmqReachable) {
  app.connectMicroservice<MicroserviceOptions>(
    {
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue: QUEUE, noAck: false, prefetchCount: 8, queueOptions: { durable: false } },
    },
    { inheritAppConfig: true },
  );
  await app.startAllMicroservices();
}
await app.listen(0, '127.0.0.1');
const url = `${await app.getUrl()}/charges`.replace('[::1]', '127.0.0.1');
const connection = rabbitmqReachable ? await amqp.connect(RABBITMQ_URL) : undefined;
const channel = await connection?.createConfirmChannel();

async function charge(): Promise<void> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
    body: JSON.stringify({ amount: 100 }),
  });
  if (response.status !== 201) throw new Error(`the charge answered ${response.status}`);
}

async function walked(start: () => Promise<unknown>, recording: Walk): Promise<WalkReport> {
  walk = recording;
  try {
    await Promise.all([start(), recording.finished]);
    return recording.report();
  } finally {
    walk = undefined;
  }
}

/** Publishes a payout as Nest's RabbitMQ client does an event, keyed by its `messageId`. */
async function publishPayout(): Promise<void> {
  const content = Buffer.from(JSON.stringify({ pattern: 'payout', data: { amount: 100 } }));
  channel!.sendToQueue(QUEUE, content, { messageId: randomUUID(), persistent: false });
  await channel!.waitForConfirms();
}

const messageAcknowledged = (entry: Entry) => entry.file === 'rabbitmq/rabbitmq-delivery.ts' && /\back$/.test(entry.fn);

let reports: { http: WalkReport; message?: WalkReport; messageSkipped?: string };
try {
  // What is read once per route or pattern (its plan) is read before the walks, which show a call in steady state.
  await charge();
  if (channel) {
    const warmUp = new Walk(() => true, messageAcknowledged);
    walk = warmUp;
    await publishPayout();
    await warmUp.finished;
    walk = undefined;
  }
  const http = await walked(
    charge,
    new Walk(
      (entry) => entry.file === 'protocol/idempotency.interceptor.ts',
      (entry) => /^(postgres|memory)\//.test(entry.file) && /\bclaim$/.test(entry.fn),
    ),
  );
  const message = channel ? await walked(publishPayout, new Walk(() => true, messageAcknowledged)) : undefined;
  reports = {
    http,
    ...(message ? { message } : { messageSkipped: `RabbitMQ cannot be reached at ${RABBITMQ_URL} (set RABBITMQ_URL)` }),
  };
} finally {
  await connection?.close();
  await app.close();
}

function printed(title: string, report: WalkReport): string {
  const seen = new Set<string>();
  const lines = report.entries.map(({ file, fn, from }, index) => {
    const again = seen.has(file) ? '  (again)' : '';
    seen.add(file);
    return `${String(index + 1).padStart(3)}. ${file}  ${fn}  <- ${from}${again}`;
  });
  const summary = `${report.entries.length} entries into ${report.files} files, ${report.reentries} into a file entered before`;
  return [`${title}: ${summary}`, ...lines].join('\n');
}

if (process.argv.includes('--json')) {
  console.log(JSON.stringify(reports));
} else {
  console.log(`Store: ${DATABASE_URL ? 'PostgreSQL at DATABASE_URL' : 'in memory (DATABASE_URL is unset)'}\n`);
  console.log(printed("One HTTP request, from the interceptor to the store's claim", reports.http));
  console.log();
  console.log(
    reports.message
      ? printed('One RabbitMQ message, from its receipt to its acknowledgement', reports.message)
      : `One RabbitMQ message: skipped, ${reports.messageSkipped}`,
  );
}
