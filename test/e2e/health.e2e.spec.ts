import { randomUUID } from 'node:crypto';
import { Controller, Post } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { getDataSourceToken } from '@nestjs/typeorm';
import request from 'supertest';
import type { DataSource, QueryRunner } from 'typeorm';
import { Idempotent, InMemoryIdempotencyStore } from '../../src/index.js';
import { type IdempotencyStore } from '../../src/store/index.js';
import { IDEMPOTENCY_STORE } from '../../src/protocol/idempotency.tokens.js';
import { IdempotencyHealthModule } from '../../src/terminus/index.js';
import { HealthController } from '../../sample-app/health.controller.js';
import { describeThroughPgBouncer, throughPgBouncer } from '../support/pgbouncer.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { startTestApp, type TestModuleOptions, useTestApp } from '../support/test-app.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';
import { Gate } from '../support/gate.js';

/** The sample app's: terminus' `HealthCheckService` with the store's indicator, on its default bound. */
const TIMEOUT_MS = 1000;

/** The indicator's result in terminus' body: its status, the check's latency, and `fields`. */
function indicator(status: 'up' | 'down', fields: Record<string, unknown>) {
  return { status, latencyMs: expect.any(Number), ...fields };
}

/** The indicator's result for a store that answers but does not listen while waits are on. */
const LISTENING_DOWN = indicator('down', {
  store: 'reachable',
  listening: 'down',
  message: expect.stringContaining('does not listen for outcomes'),
});

/** A route that waits for an attempt in flight, where the module does not. */
@Controller('work')
class WaitingController {
  @Post()
  @Idempotent({ inFlight: 'wait' })
  work() {
    return { done: true };
  }
}

const HEALTH = { imports: [TerminusModule, IdempotencyHealthModule], controllers: [HealthController] };

const health = (url: string) => request(url).get('/health');

/** The LISTEN sessions on the test file's database, by backend pid. */
async function listeners(db: TestDatabase): Promise<number[]> {
  const rows = await db.query<{ pid: number }>(
    `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`,
  );
  return rows.map(({ pid }) => pid);
}

describe("IdempotencyHealthIndicator in a terminus health check (the sample app's controller)", () => {
  const db = useTestDatabase();

  describe("on PostgreSQL, the module waiting for outcomes (inFlight: 'wait'), LISTEN on the data source", () => {
    const proxy = useTcpProxy(db);
    const app = useTestApp(
      () => ({
        database: { url: proxy.urlFor(db.url) },
        pool: { max: 3, connectionTimeoutMillis: 2000 },
        idempotency: { singleTenant: true, inFlight: 'wait' },
        ...HEALTH,
      }),
      () => proxy.bringUp(),
    );

    it('is up: the store reachable, its latency, and listening up from the first check (no wait needed first)', async () => {
      const response = await health(app.url).expect(200);
      expect(response.body).toEqual({
        status: 'ok',
        info: { idempotency: indicator('up', { store: 'reachable', listening: 'up' }) },
        error: {},
        details: { idempotency: expect.objectContaining({ status: 'up', listening: 'up' }) },
      });
      expect(await listeners(db)).toHaveLength(1);
    });

    it('opens the LISTEN connection again once it is killed: the next checks report it up, on a new backend', async () => {
      await health(app.url).expect(200);
      const [killed] = await listeners(db);
      await db.query('SELECT pg_terminate_backend($1)', [killed]);
      // Until its client sees the loss, a check's LISTEN on it may fail (503, listening down); then a check opens a
      // new one.
      const reopened = await waitFor(async () => {
        const { status, body } = await health(app.url);
        const pids = await listeners(db);
        return status === 200 && body.info.idempotency.listening === 'up' && pids.length === 1 && pids[0] !== killed
          ? pids[0]
          : undefined;
      }, 'a new LISTEN connection');
      expect(reopened).not.toBe(killed);
    });

    it('is down (503, terminus) once the database is cut, with what failed, and up again once it is back', async () => {
      proxy.takeDown();
      const response = await health(app.url).expect(503);
      expect(response.body).toEqual({
        status: 'error',
        info: {},
        error: { idempotency: indicator('down', { store: 'unreachable', message: expect.any(String) }) },
        details: { idempotency: expect.objectContaining({ status: 'down', store: 'unreachable' }) },
      });
      expect(app.logger.errors).toContainEqual(expect.stringMatching(/^ERROR \[\] Health Check has failed!/));
      // A health route is often public: its message names no host or port of the store's configuration.
      const { hostname, port } = new URL(proxy.urlFor(db.url));
      expect(response.body.error.idempotency.message).not.toContain(port);
      expect(response.body.error.idempotency.message).not.toContain(hostname);
      proxy.bringUp();
      await waitFor(async () => ((await health(app.url)).status === 200 ? true : undefined), 'the check up again');
      const back = await health(app.url).expect(200);
      expect(back.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'up' });
    });

    it('is down within its bound when the round trip cannot be made (the pool exhausted): it does not hang', async () => {
      await health(app.url).expect(200);
      // The LISTEN connection holds one of the pool's three; the other two are taken and kept.
      const dataSource = app.moduleRef.get<DataSource>(getDataSourceToken());
      const held: QueryRunner[] = [];
      try {
        for (let i = 0; i < 2; i += 1) {
          const runner = dataSource.createQueryRunner();
          await runner.connect();
          held.push(runner);
        }
        const response = await health(app.url).expect(503);
        expect(response.body.error.idempotency).toEqual(
          indicator('down', {
            store: 'unreachable',
            message: expect.stringMatching(new RegExp(`did not answer within ${TIMEOUT_MS} ms$`)),
          }),
        );
      } finally {
        await Promise.all(held.map((runner) => runner.release()));
      }
      await health(app.url).expect(200);
    });
  });

  describe('on PostgreSQL, its server gone (nothing listens at its address)', () => {
    const gone = useTcpProxy(db);
    const app = useTestApp(() => ({
      database: { url: gone.urlFor(db.url) },
      pool: { max: 3, connectionTimeoutMillis: 2000 },
      idempotency: { singleTenant: true },
      ...HEALTH,
    }));

    it('is down with a message that names no host or port of the store (a health route is often public)', async () => {
      await health(app.url).expect(200);
      const { hostname, port } = new URL(gone.urlFor(db.url));
      await gone.close();
      // The pool's idle connections are cut with the proxy; the next check has to connect, and is refused.
      const response = await health(app.url).expect(503);
      const { message } = response.body.error.idempotency as { message: string };
      expect(message).toBe('connect ECONNREFUSED');
      expect(message).not.toContain(port);
      expect(message).not.toContain(hostname);
    });
  });

  describe('on PostgreSQL, LISTEN on a listenConnection of its own', () => {
    const listenProxy = useTcpProxy(db);
    const app = useTestApp(
      () => ({
        database: db,
        pool: { max: 3 },
        postgres: { listenConnection: listenProxy.urlFor(db.url) },
        idempotency: { singleTenant: true, inFlight: 'wait' },
        ...HEALTH,
      }),
      () => listenProxy.bringUp(),
    );

    it('is down while the LISTEN connection is lost and cannot be opened again, the store reachable; up once it is', async () => {
      await health(app.url).expect(200);
      listenProxy.takeDown();
      const response = await health(app.url).expect(503);
      expect(response.body.error.idempotency).toEqual(LISTENING_DOWN);
      expect(await listeners(db)).toEqual([]);
      listenProxy.bringUp();
      const back = await health(app.url).expect(200);
      expect(back.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'up' });
      expect(await listeners(db)).toHaveLength(1);
    });
  });

  describe('on PostgreSQL, the module waiting for outcomes, its store closed by the shutdown', () => {
    const app = useTestApp(() => ({
      database: db,
      pool: { max: 3 },
      idempotency: { singleTenant: true, inFlight: 'wait' },
      ...HEALTH,
    }));

    it('is down once the store has stopped listening, while the HTTP server still answers', async () => {
      await health(app.url).expect(200);
      // What the module's beforeApplicationShutdown does after the drain; the HTTP server closes only after it.
      await app.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE).close?.();
      const response = await health(app.url).expect(503);
      expect(response.body.error.idempotency).toEqual(LISTENING_DOWN);
      expect(app.logger.errors).toContainEqual(expect.stringMatching(/^ERROR \[\] Health Check has failed!/));
      expect(await listeners(db)).toEqual([]);
    });
  });

  describe('on PostgreSQL, while the shutdown drains a running attempt', () => {
    const gate = new Gate();

    @Controller('slow')
    class SlowController {
      @Post()
      @Idempotent()
      async work() {
        await gate.pass();
        return { done: true };
      }
    }

    it("is down (shutting down) from the drain's first moment, while the HTTP server still answers", async () => {
      const app = await startTestApp({
        database: db,
        pool: { max: 3 },
        idempotency: { singleTenant: true },
        ...HEALTH,
        controllers: [...HEALTH.controllers, SlowController],
      });
      let closing: Promise<void> | undefined;
      try {
        await health(app.url).expect(200);
        const running = request(app.url).post('/slow').set('Idempotency-Key', randomUUID()).send({});
        const answered = running.then((response) => response.status);
        await gate.reached;
        closing = app.close();
        const response = await health(app.url).expect(503);
        expect(response.body.error.idempotency).toEqual(
          indicator('down', { shuttingDown: true, message: expect.stringContaining('shutting down') }),
        );
        gate.release();
        expect(await answered).toBe(201);
      } finally {
        gate.release();
        await (closing ?? app.close());
      }
      expect(app.logger.errors).toContainEqual(expect.stringMatching(/^ERROR \[\] Health Check has failed!/));
    });
  });

  describe('on PostgreSQL, the module not waiting (its default), one route waiting', () => {
    const app = useTestApp(() => ({
      database: db,
      pool: { max: 3 },
      idempotency: { singleTenant: true },
      controllers: [...HEALTH.controllers, WaitingController],
      imports: HEALTH.imports,
    }));

    it('reports listening not needed until an attempt has waited, then checks it', async () => {
      const before = await health(app.url).expect(200);
      expect(before.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'not needed' });
      expect(await listeners(db)).toEqual([]);
      await request(app.url).post('/work').set('Idempotency-Key', randomUUID()).send({}).expect(201);
      const after = await health(app.url).expect(200);
      expect(after.body.info.idempotency).toMatchObject({ store: 'reachable', listening: 'up' });
    });
  });

  describe('on PostgreSQL, the module not waiting, one route waiting, LISTEN on a listenConnection of its own', () => {
    const listenProxy = useTcpProxy(db);
    const app = useTestApp(
      () => ({
        database: db,
        pool: { max: 3 },
        postgres: { listenConnection: listenProxy.urlFor(db.url) },
        idempotency: { singleTenant: true },
        controllers: [...HEALTH.controllers, WaitingController],
        imports: HEALTH.imports,
      }),
      () => listenProxy.bringUp(),
    );

    it('is down, once the route has waited, while LISTEN is lost and once the store is closed by the shutdown', async () => {
      await request(app.url).post('/work').set('Idempotency-Key', randomUUID()).send({}).expect(201);
      await health(app.url).expect(200);
      listenProxy.takeDown();
      expect((await health(app.url).expect(503)).body.error.idempotency).toEqual(LISTENING_DOWN);
      listenProxy.bringUp();
      await health(app.url).expect(200);
      await app.moduleRef.get<IdempotencyStore>(IDEMPOTENCY_STORE).close?.();
      expect((await health(app.url).expect(503)).body.error.idempotency).toEqual(LISTENING_DOWN);
    });
  });

  describe('on PostgreSQL behind a transaction pooler, without listenConnection (waits poll the record)', () => {
    const app = useTestApp(() => ({
      database: db,
      pool: { max: 3 },
      postgres: { transactionPooler: true },
      idempotency: { singleTenant: true, inFlight: 'wait' },
      ...HEALTH,
    }));

    it('is up with listening not needed, and opens no LISTEN connection', async () => {
      const response = await health(app.url).expect(200);
      expect(response.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'not needed' }));
      expect(await listeners(db)).toEqual([]);
    });
  });

  describeThroughPgBouncer('on PostgreSQL through PgBouncer (transaction mode), the module waiting', () => {
    const pooled = useTestApp(() => ({
      database: { url: throughPgBouncer(db.url) },
      pool: { max: 3 },
      postgres: { transactionPooler: true },
      idempotency: { singleTenant: true, inFlight: 'wait' },
      ...HEALTH,
    }));
    const listeningDirectly = useTestApp(() => ({
      database: { url: throughPgBouncer(db.url) },
      pool: { max: 3 },
      postgres: { transactionPooler: true, listenConnection: db.url },
      idempotency: { singleTenant: true, inFlight: 'wait' },
      ...HEALTH,
    }));

    it('is up, listening not needed (waits poll); with a listenConnection, listening up on the server itself', async () => {
      const polling = await health(pooled.url).expect(200);
      expect(polling.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'not needed' }));
      const listening = await health(listeningDirectly.url).expect(200);
      expect(listening.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'up' }));
      expect(await listeners(db)).toHaveLength(1);
    });
  });

  describe('on the in-memory store', () => {
    const app = useTestApp(() => ({
      database: 'memory',
      idempotency: { singleTenant: true, inFlight: 'wait' },
      ...HEALTH,
    }));

    it('is up, with nothing to listen on', async () => {
      const response = await health(app.url).expect(200);
      expect(response.body.info.idempotency).toEqual(indicator('up', { store: 'reachable', listening: 'not needed' }));
    });
  });

  it("is down within its bound on a store of the application's own whose checkHealth() never answers", async () => {
    const store = new InMemoryIdempotencyStore();
    Object.defineProperty(store, 'checkHealth', { value: () => new Promise(() => undefined) });
    const app = await startTestApp({ database: 'memory', store, idempotency: { singleTenant: true }, ...HEALTH });
    try {
      const response = await health(app.url)
        .timeout(TIMEOUT_MS * 10)
        .expect(503);
      expect(response.body.error.idempotency).toEqual(
        indicator('down', { store: 'unreachable', message: `the store did not answer within ${TIMEOUT_MS} ms` }),
      );
    } finally {
      await app.close();
    }
  });

  it('refuses to start on a store without checkHealth(), naming the fix', async () => {
    const store = new InMemoryIdempotencyStore();
    Object.defineProperty(store, 'checkHealth', { value: undefined });
    const options: TestModuleOptions = { database: 'memory', store, idempotency: { singleTenant: true }, ...HEALTH };
    await expect(startTestApp(options)).rejects.toThrow(
      'IdempotencyHealthIndicator cannot check the idempotency store InMemoryIdempotencyStore: it has no ' +
        'checkHealth() method. Implement checkHealth(timeoutMs) in the store',
    );
  });
});
