import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, IdempotencyService } from '../../src/index.js';
import { Gate } from '../support/gate.js';
import { NATS_URL, natsJetStream, uniquePrefix, useTestStream } from '../support/jetstream.js';
import { RABBITMQ_URL, rabbitmq, startRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { describeOnStores } from '../support/on-each-store.js';
import { newRedisClient } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { type SpawnedApp, spawnTypeScriptServer } from '../support/sample-app.js';
import { recordsOf, recordsOn } from '../support/test-app.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { WORK_LOG } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

/**
 * A deploy, as a consumer meets it: the process gets SIGTERM (shutdown hooks enabled) in the middle of a steady stream
 * of messages, at the delivery limit the docs give (a quorum queue's `x-delivery-limit: 5`, JetStream's
 * `max_deliver: 5`). It stops taking messages first, runs and settles those in hand, and exits; the next instance,
 * started after it has gone, runs the rest. Every message runs once, and none is dead-lettered: a message given
 * back to the one consumer that refuses it would come straight back, spending its deliveries, until it was.
 */
const MESSAGES = 40;
const PUBLISH_EVERY_MS = 40;
/** Published at least before the SIGTERM: the rest go out while the process drains, and after it is gone. */
const BEFORE_SIGTERM = 12;

interface Broker {
  /** The consumer process's environment, for this broker and its destination. */
  env(): Record<string, string>;
  publish(index: number): Promise<void>;
  /** Messages the broker gave up on: dead-lettered (RabbitMQ), or past `max_deliver` (JetStream's advisories). */
  lost(): Promise<number>;
}

/** The runs of each key so far. */
const runs = (db: TestDatabase) =>
  db.query<{ key: string; runs: number }>('SELECT key, count(*)::int AS runs FROM work_log GROUP BY key');

async function deploy(broker: Broker, env: Record<string, string>, db: TestDatabase): Promise<void> {
  const spawn = () => spawnTypeScriptServer('test/support/consumer-process.ts', { ...env, ...broker.env() });
  let next: SpawnedApp | undefined;
  const first = await spawn();
  try {
    const exited = once(first.child, 'exit');
    let stopped = false;
    for (let index = 0; index < MESSAGES; index += 1) {
      // Stopped once it has run a few, in the middle of the stream: others are in hand, more on their way.
      if (!stopped && index >= BEFORE_SIGTERM && (await runs(db)).length >= 3) {
        first.child.kill('SIGTERM');
        stopped = true;
      }
      await broker.publish(index);
      await delay(PUBLISH_EVERY_MS);
    }
    expect(stopped).toBe(true);
    await exited;
    expect(first.output()).toContain('Shutting down: waiting up to');
    next = await spawn();
    const lost = await waitFor(
      async () => {
        const [rows, lostNow] = [await runs(db), await broker.lost()];
        return rows.length === MESSAGES || lostNow > 0 ? lostNow : undefined;
      },
      'every message to run (or one to be lost)',
      60_000,
    );
    expect(lost).toBe(0);
    const rows = await runs(db);
    expect(rows.filter(({ runs }) => runs !== 1)).toEqual([]);
    expect(rows).toHaveLength(MESSAGES);
    expect(first.output()).not.toMatch(/ERROR|WARN/);
  } finally {
    await first.close();
    await next?.close();
  }
}

const MODES = [
  ['a standalone microservice, standard mode', { HYBRID: 'false', TRANSACTIONAL: 'false' }],
  ['a hybrid application, transactional mode', { HYBRID: 'true', TRANSACTIONAL: 'true' }],
] as const;

/** Keys of one block's messages (the blocks share the database and, on RabbitMQ, the records' scope). */
const keyOf = (env: (typeof MODES)[number][1], index: number) =>
  `${env.HYBRID === 'true' ? 'hybrid' : 'alone'}-${index}`;

describeWith(rabbitmq, 'a RabbitMQ consumer stopped with SIGTERM mid-stream (x-delivery-limit 5)', () => {
  const db = useTestDatabase(WORK_LOG);

  describe.each(MODES)('%s', (_name, env) => {
    const queue = useTestQueue(5);
    beforeAll(() => db.query('TRUNCATE work_log'));

    it('runs every message once, on it or the next instance, and dead-letters none', async () => {
      await deploy(
        {
          env: () => ({
            BROKER: 'rabbitmq',
            DATABASE_URL: db.url,
            RABBITMQ_URL,
            QUEUE: queue.name,
            QUEUE_ARGUMENTS: JSON.stringify(queue.queueOptions.arguments),
          }),
          publish: (index) => queue.publish('work', { index }, { messageId: keyOf(env, index) }),
          lost: async () => (await queue.takeDeadLetters()).length,
        },
        env,
        db,
      );
    }, 120_000);
  });
});

describeWith(natsJetStream, 'a JetStream consumer stopped with SIGTERM mid-stream (max_deliver 5)', () => {
  const db = useTestDatabase(WORK_LOG);

  describe.each(MODES)('%s', (_name, env) => {
    const prefix = uniquePrefix();
    const stream = useTestStream(prefix, `${prefix}_deploy`);
    beforeAll(() => db.query('TRUNCATE work_log'));

    it('runs every message once, on it or the next instance, and loses none past max_deliver', async () => {
      const subject = `${prefix}.work`;
      await deploy(
        {
          env: () => ({ BROKER: 'jetstream', DATABASE_URL: db.url, NATS_URL, STREAM: stream.name, SUBJECT: subject }),
          publish: async (index) => void (await stream.publish(subject, { index }, { msgId: keyOf(env, index) })),
          lost: async () => stream.pastMaxDeliver('work').length + stream.terminated('work').length,
        },
        env,
        db,
      );
    }, 120_000);
  });
});

/** Handlers of half a second: a close comes while some run and others wait their turn. */
@Controller()
class SlowWork {
  static started = 0;

  constructor(
    private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
  ) {}

  @Idempotent()
  @EventPattern('slow.work')
  async work(@Payload() _payload: unknown): Promise<void> {
    SlowWork.started += 1;
    await delay(500);
    await this.dataSource.query('INSERT INTO work_log (key) VALUES ($1)', [this.idempotency.run?.scope.key]);
  }
}

describeWith(rabbitmq, 'a RabbitMQ consumer closed by app.close() with messages in hand', () => {
  describeOnStores('records on %s', (store) => {
    const db = useTestDatabase(WORK_LOG);
    const queue = useTestQueue(5);

    it('drains before Nest closes its channel: every message in hand runs and is acknowledged', async () => {
      SlowWork.started = 0;
      const consumer = await startRabbitMqConsumer(
        {
          ...recordsOn(store),
          database: db,
          pool: { max: 6 },
          idempotency: { singleTenant: true },
          controllers: [SlowWork],
        },
        queue,
        { prefetchCount: 10, concurrency: 2 },
      );
      try {
        await queue.publishAll(
          Array.from({ length: 6 }, (_, index) => ({
            pattern: 'slow.work',
            data: { index },
            properties: { messageId: `closed-${index}` },
          })),
        );
        await waitFor(async () => (SlowWork.started > 0 ? true : undefined), 'a handler to start');
      } finally {
        await consumer.close();
      }
      expect(await queue.ready()).toBe(0);
      expect(await runs(db)).toHaveLength(6);
      expect(await queue.takeDeadLetters()).toEqual([]);
    });
  });
});

/** A consumer whose handler runs an operation of its own through `execute()`, once its gate opens. */
let operationGate = new Gate();

@Controller()
class WithOperation {
  constructor(
    private readonly idempotency: IdempotencyService,
    private readonly context: IdempotencyContext,
  ) {}

  @Idempotent()
  @EventPattern('with.operation')
  async work(@Payload() _payload: unknown): Promise<void> {
    await operationGate.pass();
    const key = this.context.run?.scope.key as string;
    await this.idempotency.execute({ name: 'notify', key }, async () => ({ notified: key }));
  }
}

describeWith(rabbitmq, "a RabbitMQ consumer's handler that runs execute() while the app drains", () => {
  describeOnStores('records on %s', (store) => {
    const db = useTestDatabase(WORK_LOG);
    const queue = useTestQueue(5);

    it('runs the operation (in hand, like its message), and acknowledges the message', async () => {
      operationGate = new Gate();
      // The records are read once the consumer has closed: on Redis, under a prefix of the test's own (an app's own is
      // cleared when it closes), through a client of the test's (the app's is quit).
      const keyPrefix = `test:consumer-shutdown:${randomUUID()}:`;
      const consumer = await startRabbitMqConsumer(
        {
          ...recordsOn(store, { keyPrefix }),
          database: db,
          idempotency: { singleTenant: true },
          controllers: [WithOperation],
        },
        queue,
      );
      const reader = store === 'redis' ? { redis: { keyPrefix, client: newRedisClient() } } : {};
      let closing: Promise<void> | undefined;
      try {
        await queue.publish('with.operation', {}, { messageId: 'drained-operation' });
        await operationGate.reached;
        // The drain begins as the close does (before Nest closes the server): from then on the module refuses the
        // claims of operations not in hand.
        closing = consumer.close();
        await expect(
          consumer.app.get(IdempotencyService).execute({ name: 'notify', key: 'not-in-hand' }, async () => 1),
        ).rejects.toMatchObject({ code: 'idempotency_shutting_down' });
        operationGate.release();
      } finally {
        await (closing ?? consumer.close());
      }
      const records = await recordsOf(reader, db)
        .all()
        .finally(() => reader.redis?.client.quit());
      expect(records.map(({ endpoint, status }) => ({ endpoint, status }))).toEqual([
        { endpoint: 'operation notify', status: 'completed' },
        { endpoint: 'rabbitmq with.operation WithOperation.work', status: 'completed' },
      ]);
      expect(await queue.ready()).toBe(0);
      expect(await queue.takeDeadLetters()).toEqual([]);
    });
  });
});
