import { randomBytes, randomUUID } from 'node:crypto';
import { TerminusModule } from '@nestjs/terminus';
import { Redis } from 'ioredis';
import request from 'supertest';
import type { IdempotencyModuleOptions } from '../../src/index.js';
import type { IdempotencyRedisOptions } from '../../src/redis/index.js';
import { IDEMPOTENCY_STORE, type IdempotencyStore } from '../../src/store/index.js';
import { IdempotencyHealthModule } from '../../src/terminus/index.js';
import { HealthController } from '../../sample-app/health.controller.js';
import { madeBeforeAll } from '../support/made-before-all.js';
import { redis, REDIS_URL } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestApp, type TestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

/**
 * `nest-idempotency/terminus` on the Redis store (the sample app's health controller): the store's `checkHealth()` is
 * a PING on the application's client and, while waits are on, one on the store's subscriber connection, subscribed.
 * Redis is reached through a TCP proxy the tests cut.
 */

const keyPrefix = `test:${randomBytes(4).toString('hex')}:health:`;

/** The indicator's result in terminus' body: its status, the check's latency, and `fields`. */
function indicator(status: 'up' | 'down', fields: Record<string, unknown>) {
  return { status, latencyMs: expect.any(Number), ...fields };
}

/** An application of the block's tests, and the proxy its client reaches Redis through. */
interface ProxiedApp extends TestApp {
  proxy: TcpProxy;
}

const health = (app: ProxiedApp) => request(app.url).get('/health');

/**
 * The application of the block's tests, with the health controller, on a client of Redis through a proxy of its own:
 * closed after the application, which closes its store's connections through it.
 */
function useRedisApp(
  idempotency: IdempotencyModuleOptions,
  store: Omit<IdempotencyRedisOptions, 'client' | 'keyPrefix'> = {},
): ProxiedApp {
  return madeBeforeAll(
    async () => {
      const proxy = await TcpProxy.to(REDIS_URL);
      const client = new Redis(proxy.urlFor(REDIS_URL));
      client.on('error', () => undefined); // the tests read the outage from the health check
      const app = await startTestApp({
        redis: { client, keyPrefix, ...store },
        idempotency: { singleTenant: true, ...idempotency },
        controllers: [HealthController],
        imports: [TerminusModule, IdempotencyHealthModule],
      });
      return { ...app, proxy, client };
    },
    async (made) => {
      made.proxy.bringUp();
      await made.close();
      await made.client.quit();
      await made.proxy.close();
    },
  );
}

describeWith(redis, 'IdempotencyHealthIndicator on the Redis store', () => {
  describe("the module waiting for outcomes (inFlight: 'wait'), waits on pub/sub", () => {
    const app = useRedisApp({ inFlight: 'wait' });

    it('is up: Redis reachable, its latency, and listening up once subscribed', async () => {
      const response = await waitFor(async () => {
        const answer = await health(app);
        return answer.status === 200 ? answer : undefined;
      }, 'the store subscribed');
      expect(response.body).toEqual({
        status: 'ok',
        info: { idempotency: indicator('up', { store: 'reachable', listening: 'up' }) },
        error: {},
        details: { idempotency: expect.objectContaining({ status: 'up', listening: 'up' }) },
      });
    });

    it('is down (503) within its bound once Redis is cut, naming no host or port, and up again once it is back', async () => {
      await health(app).expect(200);
      app.proxy.takeDown();
      const response = await health(app).expect(503);
      expect(response.body.error).toEqual({
        idempotency: indicator('down', { store: 'unreachable', message: 'Redis did not answer within 1000 ms' }),
      });
      expect(app.logger.errors).toContainEqual(expect.stringMatching(/^ERROR \[\] Health Check has failed!/));
      const { hostname, port } = new URL(app.proxy.urlFor(REDIS_URL));
      expect(JSON.stringify(response.body)).not.toContain(port);
      expect(JSON.stringify(response.body)).not.toContain(hostname);
      app.proxy.bringUp();
      // Both connections (commands, and the subscriber's) reconnect on their own, and it subscribes again.
      const back = await waitFor(async () => {
        const answer = await health(app);
        return answer.status === 200 ? answer : undefined;
      }, 'the check up again');
      expect(back.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'up' });
    });

    it('is down, Redis reachable, once the shutdown has closed the store: it no longer listens', async () => {
      await health(app).expect(200);
      await app.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE).close?.();
      const response = await health(app).expect(503);
      expect(response.body.error.idempotency).toEqual(
        indicator('down', {
          store: 'reachable',
          listening: 'down',
          message: expect.stringContaining('does not listen for outcomes'),
        }),
      );
    });
  });

  describe('the module not waiting (its default)', () => {
    const app = useRedisApp({});

    it('reports listening not needed until an attempt has waited (a route or a consumer of its own), then subscribed', async () => {
      const before = await health(app).expect(200);
      expect(before.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'not needed' }));
      const store = app.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE);
      store.waitForChange({ account: '', endpoint: 'POST /work', key: randomUUID() }, 10).cancel();
      const after = await health(app).expect(200);
      expect(after.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'up' });
    });
  });

  describe("waits that poll (outcomeWaits: 'polling'), the module waiting", () => {
    const app = useRedisApp({ inFlight: 'wait' }, { outcomeWaits: 'polling' });

    it('is up with listening not needed, and down once Redis is cut', async () => {
      const response = await health(app).expect(200);
      expect(response.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'not needed' }));
      app.proxy.takeDown();
      expect((await health(app).expect(503)).body.error.idempotency).toMatchObject({ store: 'unreachable' });
    });
  });
});
