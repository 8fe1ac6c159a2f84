import { randomBytes, randomUUID } from 'node:crypto';
import { Body, Controller, Injectable, type INestApplication, Post, type Type } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import request from 'supertest';
import {
  Idempotent,
  IdempotencyModule,
  type IdempotencyModuleOptions,
  IdempotencyService,
  IdempotencySetupError,
} from '../../src/index.js';
import { IdempotencyRedisModule, type RedisClient, RedisIdempotencyStore } from '../../src/redis/index.js';
import { IDEMPOTENCY_STORE } from '../../src/store/index.js';
import { newRedisClient, redis } from '../support/redis.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { describeWith } from '../support/required-service.js';
import { waitFor } from '../support/wait-for.js';

// The Redis store in an application: what it refuses at start-up (transactional handlers, whatever their
// transport), and a key claimed once by concurrent requests that wait for its outcome on pub/sub.

@Controller('charges')
class ChargesController {
  runs = 0;

  @Post()
  @Idempotent({ inFlight: 'wait', inFlightWaitSeconds: 20 })
  async create(@Body() body: { amount: number }) {
    this.runs += 1;
    await new Promise((resolve) => setTimeout(resolve, 200));
    return { id: randomUUID(), amount: body.amount };
  }
}

@Controller('refunds')
class TransactionalRouteController {
  @Post()
  @Idempotent({ transactional: true })
  create() {
    return {};
  }
}

@Controller('payouts')
@Idempotent({ transactional: true })
class TransactionalControllerClass {
  @Post()
  create() {
    return {};
  }
}

/** A provider with a transactional handler, as a GraphQL resolver is one. */
@Injectable()
class TransactionalProvider {
  @Idempotent({ transactional: true })
  settle() {
    return {};
  }
}

let client: Redis | undefined;
afterAll(async () => {
  await client?.quit();
});

/** The application of a test, on the file's client of Redis, or on a client `makeClient` makes for the module. */
async function startApp(
  controllers: Type[],
  providers: Type[] = [],
  options: Partial<IdempotencyModuleOptions> = {},
  makeClient?: () => RedisClient,
): Promise<INestApplication> {
  client ??= newRedisClient();
  const moduleRef = await Test.createTestingModule({
    imports: [
      IdempotencyModule.forRoot({
        store: IdempotencyRedisModule.forRoot({
          client: makeClient ?? client,
          keyPrefix: `test:${randomBytes(4).toString('hex')}:`,
        }),
        singleTenant: true,
        ...options,
      }),
    ],
    controllers,
    providers,
  })
    .setLogger(new RecordingLogger())
    .compile();
  const app = moduleRef.createNestApplication({ rawBody: true, logger: new RecordingLogger() });
  await app.init();
  return app;
}

describeWith(redis, 'The Redis store in an application', () => {
  describe('refuses transactional handlers at start-up, naming them and the fix', () => {
    it.each([
      ['a transactional route', [TransactionalRouteController], [], {}, 'TransactionalRouteController.create'],
      ['a controller marked transactional', [TransactionalControllerClass], [], {}, 'TransactionalControllerClass'],
      ['a transactional handler of a provider', [], [TransactionalProvider], {}, 'TransactionalProvider.settle'],
      ["the module's own option", [ChargesController], [], { transactional: true }, "the module's own option"],
    ])('%s', async (_case, controllers, providers, options, named) => {
      const starting = startApp(controllers as Type[], providers as Type[], options);
      await expect(starting).rejects.toThrow(IdempotencySetupError);
      await expect(starting).rejects.toThrow(named);
      await expect(starting).rejects.toThrow('make those handlers standard (drop `transactional: true`)');
      await expect(starting).rejects.toThrow('nest-idempotency/postgres');
    });
  });

  it('refuses a transactional execute() before claiming anything', async () => {
    const app = await startApp([]);
    try {
      const idempotency = app.get(IdempotencyService);
      const operation = { name: 'payout', key: randomUUID() };
      let ran = false;
      const work = async () => {
        ran = true;
        return 1;
      };
      await expect(idempotency.execute(operation, work, { transactional: true })).rejects.toThrow(
        IdempotencySetupError,
      );
      // Nothing was claimed: the same key runs in standard mode at once.
      expect(ran).toBe(false);
      await expect(idempotency.execute(operation, work)).resolves.toEqual({ result: 1, replayed: false });
    } finally {
      await app.close();
    }
  });

  it("quits at shutdown a client it made from a factory, and leaves the application's own open", async () => {
    const made = await startApp([], [], {}, () => newRedisClient());
    const madeClient = made.get<RedisIdempotencyStore>(IDEMPOTENCY_STORE).client;
    await made.close();
    await waitFor(async () => (madeClient.status === 'end' ? true : undefined), 'the made client to end');

    const given = await startApp([]);
    await given.close();
    expect(await client?.ping()).toBe('PONG');
  });

  it('runs a key once for concurrent requests, each answered the one outcome once it is stored', async () => {
    const app = await startApp([ChargesController]);
    try {
      const key = randomUUID();
      const answers = await Promise.all(
        Array.from({ length: 8 }, () =>
          request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 5 }),
        ),
      );
      expect(answers.map(({ status }) => status)).toEqual(Array(8).fill(201));
      expect(new Set(answers.map(({ text }) => text)).size).toBe(1);
      expect(app.get(ChargesController).runs).toBe(1);
    } finally {
      await app.close();
    }
  });
});
