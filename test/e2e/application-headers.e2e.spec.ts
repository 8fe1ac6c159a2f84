import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Controller, type INestApplication, Post, Req } from '@nestjs/common';
import request from 'supertest';
import { type IdempotencyModuleOptions, Idempotent } from '../../src/index.js';
import { GateQueue } from '../support/gate.js';
import { type Platform, PLATFORMS, type PlatformRequest } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { describeOnStores } from '../support/on-each-store.js';
import { REDIS_URL } from '../support/redis.js';
import { startTestApp } from '../support/test-app.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { useTestDatabase } from '../support/test-database.js';

// Issue 17: headers an application sets on every response (a request id, CORS) are on the module's answers, as on any
// response. On Fastify, a hook sets them on the reply, which keeps them apart from the Node.js response until Fastify
// sends it: the answers the module writes to the Node.js response itself (a replay, the 503 of a shutdown) copy them
// from the reply (`syncHeaders`). Its refusals at the claim (409, 503) go through Nest's exception filter, which sends
// them with the reply's headers whatever the module does; they are here so that the contract holds for every answer.

const ORIGIN = 'https://shop.example';

const gates = new GateQueue();

@Controller('orders')
@Idempotent()
class OrdersController {
  runs = 0;

  @Post()
  async create(@Req() request: PlatformRequest) {
    await gates.pass(request);
    return { run: (this.runs += 1) };
  }
}

/** The parts of Fastify's instance and reply a request-id hook uses. */
interface FastifyWithHooks {
  addHook(
    name: 'onRequest',
    hook: (request: unknown, reply: { header(name: string, value: string): unknown }) => Promise<void>,
  ): void;
}

/**
 * A request id on every response, set the platform's way: on Express, by a middleware on the response; on Fastify,
 * by an `onRequest` hook on the reply.
 */
function addRequestIds(app: INestApplication, platform: Platform): void {
  let requests = 0;
  const nextId = () => `req-${(requests += 1)}`;
  if (platform === 'fastify') {
    (app.getHttpAdapter().getInstance() as FastifyWithHooks).addHook('onRequest', async (_request, reply) => {
      reply.header('x-request-id', nextId());
    });
  } else {
    app.use((_request: unknown, response: ServerResponse, next: () => void) => {
      response.setHeader('x-request-id', nextId());
      next();
    });
  }
}

const db = useTestDatabase();

afterAll(() => {
  gates.releaseAll(); // a failed test may leave a handler waiting at its gate
});

describeOnStores('records on %s', (store) => {
  /** In front of the store's server (the file's database, or Redis), to take it away. */
  const proxy = useTcpProxy({
    get url() {
      return store === 'redis' ? REDIS_URL : db.url;
    },
  });
  // A failed test may leave the store down.
  afterAll(() => proxy.bringUp());

  describe.each(PLATFORMS)(
    'on %s, the headers the application sets on every response (request id, CORS)',
    (platform) => {
      const logger = new RecordingLogger();
      let app: INestApplication;
      let url: string;

      /** The app of this platform, with CORS and request ids, and the module's `options`, its store behind the proxy. */
      async function startApp(options: Partial<IdempotencyModuleOptions> = {}) {
        const { app: started, url: startedUrl } = await startTestApp({
          platform,
          ...(store === 'redis'
            ? { redis: { url: proxy.urlFor(REDIS_URL) } }
            : { database: { url: proxy.urlFor(db.url) }, pool: { connectionTimeoutMillis: 1000 } }),
          // ioredis keeps a command while it reconnects: storeTimeoutSeconds is what answers it.
          idempotency: {
            singleTenant: true,
            inFlight: 'conflict',
            ...(store === 'redis' ? { storeTimeoutSeconds: 1 } : {}),
            ...options,
          },
          controllers: [OrdersController],
          logger,
          configure: (app) => {
            app.enableCors({ origin: true });
            addRequestIds(app, platform);
          },
        });
        return { app: started, url: startedUrl };
      }

      beforeAll(async () => {
        ({ app, url } = await startApp());
      });

      afterAll(async () => {
        proxy?.bringUp();
        gates.releaseAll();
        await app?.close();
      });

      const post = (key: string, to = url) =>
        request(to).post('/orders').set('Origin', ORIGIN).set('Idempotency-Key', key).send({ amount: 1 });

      const expectApplicationHeaders = (response: request.Response) => {
        expect(response.headers['x-request-id']).toMatch(/^req-\d+$/);
        expect(response.headers['access-control-allow-origin']).toBe(ORIGIN);
      };

      it('are on a replay', async () => {
        const key = randomUUID();
        const first = await post(key).expect(201);
        expectApplicationHeaders(first);
        const replay = await post(key).expect(201);
        expect(replay.headers['idempotent-replay']).toBe('true');
        expectApplicationHeaders(replay);
        expect(replay.headers['x-request-id']).not.toBe(first.headers['x-request-id']);
        expect(replay.body).toEqual(first.body);
      });

      it('are on a 409 to a duplicate of an attempt in progress', async () => {
        const key = randomUUID();
        const gate = gates.holdNext();
        const first = post(key).then((response) => response);
        await gate.reached;
        const conflict = await post(key).expect(409);
        expect(conflict.body.error).toBe('request_in_progress');
        expectApplicationHeaders(conflict);
        gate.release();
        expect((await first).status).toBe(201);
      });

      it('are on a 503 when the store cannot be reached', async () => {
        const key = randomUUID();
        proxy.takeDown();
        try {
          const refused = await post(key).expect(503);
          expect(refused.body.error).toBe('idempotency_store_unavailable');
          expectApplicationHeaders(refused);
        } finally {
          proxy.bringUp();
        }
        expect(logger.errors).toEqual([
          expect.stringMatching(
            new RegExp(
              `^ERROR \\[Idempotency\\] Claiming key "${key}" of POST /orders failed \\(the store is unavailable\\): `,
            ),
          ),
        ]);
      });

      it('are on the 503 the module answers for an attempt that a shutdown ends', async () => {
        const closing = await startApp({ shutdownTimeoutSeconds: 0.2 });
        const gate = gates.holdNext();
        const held = post(randomUUID(), closing.url).then((response) => response);
        await gate.reached;
        const closed = closing.app.close();
        try {
          const ended = await held;
          expect(ended.status).toBe(503);
          expect(ended.body.error).toBe('idempotency_shutting_down');
          expectApplicationHeaders(ended);
        } finally {
          gate.release();
          await closed;
        }
        // (Its second app also has Nest's TypeORM module warn that a data source of the default name is registered.)
        expect(logger.warnings.filter((warning) => warning.includes('[Idempotency]'))).toEqual([
          expect.stringMatching(
            /^WARN \[Idempotency\] Shutting down: the handler of .* did not finish within shutdownTimeoutSeconds/,
          ),
        ]);
      });
    },
  );
});
