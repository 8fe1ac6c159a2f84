import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { type CanActivate, Controller, UseGuards } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyContext, InMemoryIdempotencyStore } from '../../src/index.js';
import { IDEMPOTENCY_STORE, type IdempotencyStore } from '../../src/store/index.js';
import { canonicalJson } from '../../src/shared/canonical-json.js';
import { natsJetStream, startJetStreamConsumer, uniquePrefix, useTestStream } from '../support/jetstream.js';
import type { TestConsumer } from '../support/consumer-app.js';
import {
  rabbitmq,
  rabbitMqClient,
  request,
  type TestQueue,
  useRabbitMqConsumer,
  useTestQueue,
} from '../support/rabbitmq.js';
import { describeOnStores } from '../support/on-each-store.js';
import { payoutsConsumer } from '../support/payouts-consumer.js';
import { REDIS_URL } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { recordsOf, recordsOn } from '../support/test-app.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

/** Waits until the message of `key` has run, or was dead-lettered; resolves to the dead letters taken. */
async function ranOrDeadLettered(db: TestDatabase, queue: TestQueue, key: string, timeoutMs: number) {
  const dead: unknown[] = [];
  await waitFor(
    async () => {
      dead.push(...(await queue.takeDeadLetters()));
      return dead.length > 0 || (await workRowsOf(db, key)).length > 0 ? true : undefined;
    },
    `the message ${key} to run or be dead-lettered`,
    timeoutMs,
  );
  return dead;
}

/** Refuses every message: a guard that keeps a handler from running, before the module's interceptor sees it. */
class RefuseAll implements CanActivate {
  canActivate(): boolean {
    return false;
  }
}

/**
 * Two `@Idempotent()` handlers of one event (Nest runs both with the same message): `audit` runs at once, `notify`
 * fails the first time it sees a key, once `audit` is done; with `guarded`, a guard refuses `notify` every message.
 * Each writes `<handler>:<key>` in work_log.
 */
function twoHandlersOf(pattern: string | Record<string, string>, guarded = false) {
  const failedOnce = new Set<string>();

  @Controller()
  class PayoutEffects {
    constructor(
      private readonly dataSource: DataSource,
      private readonly idempotency: IdempotencyContext,
    ) {}

    @Idempotent()
    @EventPattern(pattern)
    async audit(@Payload() _payout: unknown): Promise<void> {
      await this.write('audit');
    }

    @Idempotent()
    @UseGuards(...(guarded ? [RefuseAll] : []))
    @EventPattern(pattern)
    async notify(@Payload() _payout: unknown): Promise<void> {
      const key = this.idempotency.run?.scope.key as string;
      if (!failedOnce.has(key)) {
        failedOnce.add(key);
        // After `audit` has stored its outcome: the message must not be settled by it alone.
        await delay(300);
        throw new Error('the notification service timed out');
      }
      await this.write('notify');
    }

    private async write(handler: string): Promise<void> {
      await this.dataSource.query('INSERT INTO work_log (key) VALUES ($1)', [
        `${handler}:${this.idempotency.run?.scope.key}`,
      ]);
    }
  }
  return PayoutEffects;
}

/** Both handlers' effects of `key`, once each, and nothing more after a while. */
async function expectBothOnce(db: TestDatabase, key: string): Promise<void> {
  const effects = async () =>
    (await db.query<{ key: string }>('SELECT key FROM work_log WHERE key LIKE $1 ORDER BY key', [`%:${key}`])).map(
      (row) => row.key,
    );
  await waitFor(async () => ((await effects()).length >= 2 ? true : undefined), `both handlers' effects of ${key}`);
  expect(await effects()).toEqual([`audit:${key}`, `notify:${key}`]);
}

describeWith(rabbitmq, 'RabbitMQ consumers composed as applications compose them', () => {
  describeOnStores('records on %s', (store) => {
    // Of its own: the blocks of each store use the same keys.
    const db = useTestDatabase(WORK_LOG);

    describe("with inFlight: 'conflict' module-wide, after a consumer died holding the key", () => {
      const queue = useTestQueue(5);
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 3 },
        idempotency: { singleTenant: true, inFlight: 'conflict' },
        controllers: [PayoutsConsumer],
      }));

      it('hold the redelivered message, and run it once the dead claim lapses', async () => {
        const payload = { amount: 4 };
        // What a consumer SIGKILLed in its handler leaves in standard mode: its claim, with the consumers' lease (15 s),
        // made through the store of this one.
        const claim = await consumer.app
          .get<IdempotencyStore>(IDEMPOTENCY_STORE)
          .claim(
            { account: '', endpoint: 'rabbitmq payout.requested PayoutsConsumer.pay', key: 'orphaned' },
            createHash('sha256').update(canonicalJson(payload)).digest('hex'),
            randomUUID(),
            { leaseSeconds: 15, ttlSeconds: 86_400 },
          );
        expect(claim).toEqual({ claimed: true, takeover: false });
        await queue.publish('payout.requested', payload, { messageId: 'orphaned' });
        expect(await ranOrDeadLettered(db, queue, 'orphaned', 30_000)).toEqual([]);
      }, 40_000);
    });

    describe.each([
      ['a string pattern', 'payout.settled'],
      ['an object pattern', { cmd: 'payout.settled', v: '1' }],
    ])('two idempotent handlers of one event, one failing once, on %s', (name, pattern) => {
      const queue = useTestQueue(5);
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 4 },
        idempotency: { singleTenant: true, retryAfterSeconds: 0.2 },
        controllers: [twoHandlersOf(pattern)],
      }));

      it('settles the message once both stored their outcomes: each effect once, the first replayed', async () => {
        const key = `two-handlers-${name.split(' ')[1]}`;
        // An object published with its keys in another order: Nest routes it all the same, and so does the settlement.
        const published = typeof pattern === 'string' ? pattern : { v: pattern.v, cmd: pattern.cmd };
        await queue.publish(published, { amount: 5 }, { messageId: key });
        await expectBothOnce(db, key);
        await waitFor(async () => ((await queue.ready()) === 0 ? true : undefined), 'the queue to be empty');
        await consumer.close();
        expect(await queue.ready()).toBe(0);
        expect(await queue.takeDeadLetters()).toEqual([]);
      });
    });

    describe('two idempotent handlers of one event, a guard refusing one', () => {
      const queue = useTestQueue(5);
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 4 },
        idempotency: { singleTenant: true, retryAfterSeconds: 0.2 },
        controllers: [twoHandlersOf('payout.guarded', true)],
      }));

      it('settles the message by the handler that ran, and says which did not', async () => {
        await queue.publish('payout.guarded', { amount: 6 }, { messageId: 'guarded' });
        const absent = 'The idempotent handler(s) PayoutEffects.notify of a message did not run';
        await waitFor(
          async () => (consumer.logger.warnings.some((line) => line.includes(absent)) ? true : undefined),
          'the message settled without the refused handler',
        );
        // Acknowledged: closing the channel gives nothing back.
        await consumer.close();
        expect(await queue.ready()).toBe(0);
        expect(await queue.takeDeadLetters()).toEqual([]);
        const effects = await db.query<{ key: string }>('SELECT key FROM work_log WHERE key LIKE $1', ['%:guarded']);
        expect(effects.map((row) => row.key)).toEqual(['audit:guarded']);
      });
    });

    describe.each([
      ['leaves out 422', (status: number) => status < 500 && status !== 422],
      ['keeps only 2xx', (status: number) => status >= 200 && status < 300],
    ])('a module-wide isFinalStatus that %s (HTTP’s option)', (_name, isFinalStatus) => {
      const runs = new Map<string, number>();
      const Consumer = payoutsConsumer<unknown>({ event: 'payout.requested', request: 'payout.quote' }, (key) =>
        runs.set(key, (runs.get(key) ?? 0) + 1),
      );
      const queue = useTestQueue(5);
      const consumer = useRabbitMqConsumer(queue, () => ({
        ...recordsOn(store),
        database: db,
        pool: { max: 4 },
        idempotency: { singleTenant: true, isFinalStatus, retryAfterSeconds: 0.2 },
        controllers: [Consumer],
      }));
      const records = recordsOf(consumer, db);

      it.each([
        ['an RpcException', 'final'],
        ["a ValidationPipe's 400", 'invalid'],
      ])('stores a final error (%s): its message redelivered and published again runs once', async (_error, mode) => {
        const key = `final-${mode}-${isFinalStatus(422) ? 'x' : 'y'}-${randomUUID()}`;
        const handled = consumer.handled.count;
        await queue.publish('payout.requested', { amount: 1, mode }, { messageId: key });
        await waitFor(async () => (consumer.handled.count > handled ? true : undefined), 'the message handled');
        await waitFor(
          async () => ((await records.statusOf(key)) === 'completed' ? true : undefined),
          'its final error stored',
        );
        await queue.publish('payout.requested', { amount: 1, mode }, { messageId: key });
        await waitFor(async () => (consumer.handled.count > handled + 1 ? true : undefined), 'the copy handled');
        expect(runs.get(key)).toBe(1);
        expect(await queue.takeDeadLetters()).toEqual([]);
      });
    });
  });
});

describeWith(natsJetStream, 'a JetStream consumer with two idempotent handlers of one event, one failing once', () => {
  describeOnStores('records on %s', (store) => {
    const db = useTestDatabase(WORK_LOG);
    const prefix = uniquePrefix();
    const stream = useTestStream(prefix, `${prefix}_two`);
    let consumer: TestConsumer;
    beforeAll(async () => {
      consumer = await startJetStreamConsumer(
        {
          ...recordsOn(store),
          database: db,
          pool: { max: 4 },
          idempotency: { singleTenant: true, retryAfterSeconds: 0.2 },
          controllers: [twoHandlersOf(`${prefix}.settled`)],
        },
        { stream: stream.name, durable: 'effects', subjects: [`${prefix}.>`], provision: 'consumer', maxDeliver: 5 },
      );
    });
    afterAll(() => consumer.close());

    it('acknowledges the message once both stored their outcomes: each effect once', async () => {
      await stream.publish(`${prefix}.settled`, { amount: 5 }, { msgId: 'js-two-handlers' });
      await expectBothOnce(db, 'js-two-handlers');
      await stream.allSettled('effects');
      expect(stream.pastMaxDeliver('effects')).toEqual([]);
    });
  });
});

const PayoutsConsumer = payoutsConsumer({ event: 'payout.requested', request: 'payout.quote' });

/** A store with a bug: the first wait for an outcome throws a `TypeError`, none of the protocol's refusals. */
class OnceBrokenStore extends InMemoryIdempotencyStore {
  private broken = false;

  override waitForChange(...args: Parameters<InMemoryIdempotencyStore['waitForChange']>) {
    if (!this.broken) {
      this.broken = true;
      throw new TypeError('a bug of the store');
    }
    return super.waitForChange(...args);
  }
}

describeWith(rabbitmq, 'a RabbitMQ consumer whose store fails with an error of its own', () => {
  const queue = useTestQueue(5);
  const ran: string[] = [];

  @Controller()
  class Recorded {
    constructor(private readonly idempotency: IdempotencyContext) {}

    @Idempotent()
    @EventPattern('recorded')
    record(@Payload() _payload: unknown): void {
      ran.push(this.idempotency.run?.scope.key as string);
    }
  }

  const consumer = useRabbitMqConsumer(
    queue,
    () => ({
      database: 'memory',
      store: new OnceBrokenStore(),
      idempotency: { singleTenant: true, retryAfterSeconds: 0.2 },
      controllers: [Recorded],
    }),
    { concurrency: 1 },
  );

  it('gives the message back and frees its turn: it runs on its redelivery, and the next message runs too', async () => {
    await queue.publish('recorded', { n: 1 }, { messageId: 'broken-a' });
    await queue.publish('recorded', { n: 2 }, { messageId: 'broken-b' });
    await waitFor(async () => (ran.length === 2 ? true : undefined), 'both messages to run');
    expect([...ran].sort()).toEqual(['broken-a', 'broken-b']);
    expect(consumer.logger.warnings).toContainEqual(expect.stringContaining('TypeError: a bug of the store'));
  });
});

describeWith(rabbitmq, 'a RabbitMQ request whose reply cannot be sent as JSON (a BigInt)', () => {
  const queue = useTestQueue(5);
  const runs: string[] = [];

  @Controller()
  class Balances {
    constructor(private readonly idempotency: IdempotencyContext) {}

    @Idempotent()
    @MessagePattern('balance.read')
    read(@Payload() _payload: unknown): { cents: bigint } {
      runs.push(this.idempotency.run?.scope.key as string);
      return { cents: 1n };
    }
  }

  useRabbitMqConsumer(queue, () => ({
    database: 'memory',
    idempotency: { singleTenant: true, retryAfterSeconds: 0.2 },
    controllers: [Balances],
  }));

  it("stores the failure to answer as the request's final error: sent again, it gets the same, without running", async () => {
    const client = await rabbitMqClient(queue);
    try {
      const first = request(client, 'balance.read', {}, 'bigint-reply');
      await expect(first).rejects.toEqual({ name: 'TypeError', message: expect.stringContaining('BigInt') });
      await expect(request(client, 'balance.read', {}, 'bigint-reply')).rejects.toEqual(await first.catch((e) => e));
    } finally {
      await client.close();
    }
    expect(runs).toEqual(['bigint-reply']);
    expect(await queue.takeDeadLetters()).toEqual([]);
  });
});

describeWith(rabbitmq, 'a RabbitMQ request held for holdSeconds while the store is down', () => {
  describeOnStores('records on %s', (store) => {
    const db = useTestDatabase(WORK_LOG);
    const queue = useTestQueue(5);
    /** In front of the store's server (the file's database, or Redis), to take it away. */
    const proxy = useTcpProxy({
      get url() {
        return store === 'redis' ? REDIS_URL : db.url;
      },
    });
    const consumer = useRabbitMqConsumer(
      queue,
      () => ({
        ...(store === 'redis'
          ? { redis: { url: proxy.urlFor(REDIS_URL) }, database: db }
          : { database: { url: proxy.urlFor(db.url) }, pool: { max: 3, connectionTimeoutMillis: 1000 } }),
        idempotency: { singleTenant: true, retryAfterSeconds: 0.2, storeTimeoutSeconds: 1 },
        controllers: [PayoutsConsumer],
      }),
      { holdSeconds: 1 },
    );

    it('gives it back past the bound, and its caller waits for the reply of the delivery that runs', async () => {
      const client = await rabbitMqClient(queue);
      proxy.takeDown();
      try {
        const reply = request(client, 'payout.quote', { amount: 3 }, 'held-request');
        await waitFor(
          async () => (consumer.logger.warnings.some((line) => line.includes('it is given back')) ? true : undefined),
          'the request given back past holdSeconds',
        );
        proxy.bringUp();
        await expect(reply).resolves.toEqual({ quoted: 6, run: expect.any(Number) });
      } finally {
        proxy.bringUp();
        await client.close();
      }
      expect(await workRowsOf(db, 'held-request')).toHaveLength(1);
    });
  });
});
