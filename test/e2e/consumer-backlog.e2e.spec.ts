import { Controller, type Type } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { setTimeout as delay } from 'node:timers/promises';
import { Idempotent, IdempotencyContext } from '../../src/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import type { TestConsumer } from '../support/consumer-app.js';
import { natsJetStream, startJetStreamConsumer, uniquePrefix, useTestStream } from '../support/jetstream.js';
import { rabbitmq, startRabbitMqConsumer, useTestQueue } from '../support/rabbitmq.js';
import { describeWith } from '../support/required-service.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { WORK_LOG } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

/**
 * A backlog, as a transactional consumer set up the way docs/rabbitmq.md (and docs/jetstream.md) shows meets it: started on 2,000 queued
 * messages with Nest's default prefetch (0: every message is delivered at once), TypeORM's default pool (10), and every
 * default of the module. The store serves 7 transactions at once: the consumer runs that many messages at a time, and
 * holds the rest, unsettled, rather than refuse them once a transaction slot takes longer than `storeTimeoutSeconds`
 * to free (each refusal spent a delivery of the queue's limit, and dead-lettered many). None is dead-lettered, and
 * none is refused. A JetStream consumer pulls only what it runs (`maxInFlight`, 10, beside the store's 7): the
 * backlog waits in the stream, and none of it goes past `max_deliver: 5`.
 *
 * CI runs it with handlers of `BACKLOG_HANDLER_MS` (200 ms, about a minute in all); `npm run test:backlog`
 * runs it with the 1 s handlers of the report (about five minutes).
 */
const MESSAGES = 2_000;
const HANDLER_MS = Number(process.env.BACKLOG_HANDLER_MS ?? 200);

/** A consumer of `pattern` whose transactional handler writes its key in work_log, then takes `HANDLER_MS`. */
function slowPayouts(pattern: string): Type<unknown> {
  @Controller()
  class SlowPayouts {
    constructor(
      private readonly postgres: PostgresIdempotencyContext,
      private readonly idempotency: IdempotencyContext,
    ) {}

    @Idempotent()
    @EventPattern<string>(pattern)
    async pay(@Payload() _payout: unknown): Promise<void> {
      await (this.postgres.manager as NonNullable<PostgresIdempotencyContext['manager']>).query(
        'INSERT INTO work_log (key) VALUES ($1)',
        [this.idempotency.run?.scope.key],
      );
      await delay(HANDLER_MS);
    }
  }
  return SlowPayouts;
}

/** How many runs work_log holds, and of how many keys. */
async function runsOf(db: TestDatabase): Promise<{ runs: number; keys: number }> {
  const [counts] = await db.query<{ runs: number; keys: number }>(
    'SELECT count(*)::int AS runs, count(DISTINCT key)::int AS keys FROM work_log',
  );
  return counts;
}

describeWith(rabbitmq, 'a transactional RabbitMQ consumer started on a backlog, as the docs set it up', () => {
  const db = useTestDatabase(WORK_LOG);
  const queue = useTestQueue(5);
  let consumer: TestConsumer | undefined;
  afterAll(() => consumer?.close());

  it(
    `runs ${MESSAGES} queued messages once each, holding what waits, and dead-letters none`,
    async () => {
      await queue.publishAll(
        Array.from({ length: MESSAGES }, (_, index) => ({
          pattern: 'payout.requested',
          data: { amount: index },
          properties: { messageId: `backlog-${index}` },
        })),
      );
      consumer = await startRabbitMqConsumer(
        {
          database: db,
          idempotency: { singleTenant: true, transactional: true },
          controllers: [slowPayouts('payout.requested')],
        },
        queue,
        { prefetchCount: 0 },
      );
      const ran = async () => (await runsOf(db)).runs;
      let dead = 0;
      await waitFor(
        async () => {
          dead += (await queue.takeDeadLetters()).length;
          return dead > 0 || (await ran()) >= MESSAGES ? true : undefined;
        },
        'every message to run (or one to be dead-lettered)',
        (MESSAGES * HANDLER_MS) / 2 + 60_000,
      );
      expect(dead).toBe(0);
      expect(await runsOf(db)).toEqual({ runs: MESSAGES, keys: MESSAGES });
      await waitFor(async () => ((await queue.ready()) === 0 ? true : undefined), 'the queue to be empty');
      expect(consumer.logger.errors).toEqual([]);
      // Nest's default prefetch loses nothing here, but would at a deploy during the backlog: the module says so.
      expect(consumer.logger.warnings).toContainEqual(
        expect.stringContaining("takes every message of its queue at once (prefetchCount 0, Nest's default)"),
      );
    },
    (MESSAGES * HANDLER_MS) / 2 + 120_000,
  );
});

describeWith(natsJetStream, 'a transactional JetStream consumer started on a backlog, as the docs set it up', () => {
  const db = useTestDatabase(WORK_LOG);
  const prefix = uniquePrefix();
  const stream = useTestStream(prefix, `${prefix}_backlog`);
  const durable = 'backlog';
  let consumer: TestConsumer | undefined;
  afterAll(() => consumer?.close());

  it(
    `runs ${MESSAGES} stored messages once each, and loses none past max_deliver 5`,
    async () => {
      for (let index = 0; index < MESSAGES; index += 1) {
        await stream.publish(`${prefix}.payout`, { amount: index }, { msgId: `backlog-${index}` });
      }
      consumer = await startJetStreamConsumer(
        {
          database: db,
          idempotency: { singleTenant: true, transactional: true },
          controllers: [slowPayouts(`${prefix}.payout`)],
        },
        { stream: stream.name, durable, subjects: [`${prefix}.>`], provision: 'consumer', maxDeliver: 5 },
      );
      const lost = () => stream.pastMaxDeliver(durable).length + stream.terminated(durable).length;
      await waitFor(
        async () => (lost() > 0 || (await runsOf(db)).runs >= MESSAGES ? true : undefined),
        'every message to run (or one to be lost)',
        (MESSAGES * HANDLER_MS) / 2 + 60_000,
      );
      expect(lost()).toBe(0);
      expect(await runsOf(db)).toEqual({ runs: MESSAGES, keys: MESSAGES });
      await stream.allSettled(durable);
      expect(consumer.logger.errors).toEqual([]);
    },
    (MESSAGES * HANDLER_MS) / 2 + 120_000,
  );
});
