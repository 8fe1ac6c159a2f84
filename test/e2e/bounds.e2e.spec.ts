import { randomUUID } from 'node:crypto';
import { Controller, type INestApplication, Post, Req } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type pg from 'pg';
import request from 'supertest';
import type { DataSource } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import { type IdempotencyModuleOptions, Idempotent } from '../../src/index.js';
import { type IdempotencyClaim } from '../../src/store/index.js';
import { PostgresIdempotencyStore } from '../../src/postgres/index.js';
import { Gate } from '../support/gate.js';
import { headerOf, type Platform, PLATFORMS, type PlatformRequest as Request } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { expectHeldThroughout } from '../support/lease.js';
import { useTestDatabase } from '../support/test-database.js';
import { startTestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

/** The gate every gated handler waits at; `entered` counts the handlers that reached it. */
let gate = new Gate();
let entered = 0;

@Controller('bounded')
class BoundedController {
  /** Only the request sent with `X-Hold` waits: a retry that took its key over answers at once. */
  @Post('held')
  @Idempotent()
  async held(@Req() req: Request) {
    if (headerOf(req, 'x-hold')) await gate.pass(req);
    return { held: true };
  }

  @Post('tx')
  @Idempotent({ transactional: true })
  async transactional(@Req() req: Request) {
    entered += 1;
    await gate.pass(req);
    return { transactional: true };
  }

  @Post('wait')
  @Idempotent({ inFlight: 'wait' })
  wait() {
    return { waited: true };
  }

  @Post('plain')
  @Idempotent()
  plain() {
    return { plain: true };
  }
}

/** The real store, except that its first lease renewal is sent and never answered. */
class FirstRenewalHangs extends PostgresIdempotencyStore {
  private hung = false;

  override renew(claim: IdempotencyClaim, timing: { leaseSeconds: number; ttlSeconds: number }): Promise<boolean> {
    if (this.hung) return super.renew(claim, timing);
    this.hung = true;
    return new Promise<boolean>(() => undefined);
  }
}

const db = useTestDatabase();
const logger = new RecordingLogger();
let app: INestApplication | undefined;
let url: string;

beforeEach(() => {
  gate = new Gate();
  entered = 0;
});

afterEach(async () => {
  gate.release(); // a failed test may leave handlers at the gate; the server cannot close before they answer
  await app?.close();
  app = undefined;
});

/** Starts the app on `platform` on a pool of `poolSize` connections, with the real store or a subclass of it. */
async function startApp(
  platform: Platform,
  poolSize: number,
  options: IdempotencyModuleOptions,
  Store = PostgresIdempotencyStore,
) {
  ({ app, url } = await startTestApp({
    platform,
    database: db,
    pool: { max: poolSize },
    overrideStore: (dataSource) => new Store(dataSource, 'idempotency_records'),
    idempotency: {
      accountResolver: (context) => headerOf(context.switchToHttp().getRequest<Request>(), 'x-account') ?? 'acct',
      ...options,
    },
    controllers: [BoundedController],
    logger,
  }));
  return app;
}

/** A request to the waiting route answers, and its listener stays on a connection of the pool. */
async function expectListenerHeld() {
  await post('wait', randomUUID()).expect(201); // waiting routes listen before they claim
  await expect(
    db.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'`),
  ).resolves.toHaveLength(1);
}

const post = (path: string, key: string) => request(url).post(`/bounded/${path}`).set('Idempotency-Key', key).send({});

describe.each(PLATFORMS)('on %s', (platform) => {
  describe('lease renewals', () => {
    it('go on after one the database never answers: a slow handler keeps its claim for several leases', async () => {
      const leaseSeconds = 1.2;
      await startApp(platform, 10, { leaseSeconds, storeTimeoutSeconds: 0.3 }, FirstRenewalHangs);
      const key = randomUUID();
      const first = post('held', key)
        .set('X-Hold', 'yes')
        .then((response) => response);
      await gate.reached;
      await expectHeldThroughout(db, key, 3 * leaseSeconds, () => post('held', key).expect(409));
      gate.release();
      expect((await first).status).toBe(201);
      expect(logger.warnings).toContain(
        `WARN [Idempotency] Renewing the lease of key "${key}" of POST /bounded/held failed: ` +
          'Error: renewing the lease took longer than storeTimeoutSeconds (0.3 s)',
      );
    });
  });

  describe('a waiter when every pooled connection is taken', () => {
    it('is answered (503 with Retry-After) instead of hanging, and the app works again once they are given back', async () => {
      const started = await startApp(platform, 4, { inFlightWaitSeconds: 2, storeTimeoutSeconds: 1 });
      const pool = (started.get<DataSource>(getDataSourceToken()).driver as PostgresDriver).master as pg.Pool;
      const free = pool.options.max - (pool.totalCount - pool.idleCount);
      const taken = await Promise.all(Array.from({ length: free }, () => pool.connect()));
      const key = randomUUID();
      try {
        const refused = await post('wait', key).timeout(20_000);
        expect(refused.status).toBe(503);
        expect(refused.body.error).toBe('idempotency_store_unavailable');
        expect(refused.headers['retry-after']).toBe('2');
        expect(logger.errors).toContain(
          `ERROR [Idempotency] Claiming key "${key}" of POST /bounded/wait failed (the store is unavailable): ` +
            'Error: claim took longer than storeTimeoutSeconds (1 s)',
        );
      } finally {
        for (const client of taken) client.release();
      }
      // The refused claim may land late and be given back meanwhile: retry until the key is free.
      const retried = await waitFor(async () => {
        const response = await post('wait', key);
        return response.status === 503 || response.status === 409 ? undefined : response;
      }, 'the retry to run');
      expect(retried.status).toBe(201);
      await post('wait', randomUUID()).expect(201);
    });
  });

  describe('transactional handlers on a pool of five', () => {
    /**
     * Sends five transactional requests whose handlers wait at the gate, and resolves with how many entered once
     * the others were refused (503) for want of a transaction slot, which is logged for each.
     */
    async function holdFive() {
      const refused: string[] = [];
      const answers = Array.from({ length: 5 }, () => {
        const key = randomUUID();
        return post('tx', key).then((response) => {
          if (response.status === 503 && response.body.error === 'idempotency_store_unavailable') refused.push(key);
          return response;
        });
      });
      await waitFor(
        async () => (entered + refused.length === 5 ? true : undefined),
        'each request to enter its handler or be refused',
      );
      for (const key of refused) {
        expect(logger.errors).toContain(
          `ERROR [Idempotency] Opening the transaction of key "${key}" of POST /bounded/tx failed (the store is ` +
            'unavailable): Error: no connection slot became free within 1000 ms',
        );
      }
      return { running: entered, answers };
    }

    /** Of five held requests, `running` run at once; a claim on another route succeeds meanwhile; those `running` answer 201. */
    async function expectFiveHeldOfWhichRun(running: number) {
      const held = await holdFive();
      expect(held.running).toBe(running);
      await post('plain', randomUUID()).expect(201);
      gate.release();
      expect((await Promise.all(held.answers)).filter((response) => response.status === 201)).toHaveLength(running);
    }

    it('run at most pool size - 2 at once, and a claim on another route still succeeds meanwhile', async () => {
      await startApp(platform, 5, { storeTimeoutSeconds: 1 });
      await expectFiveHeldOfWhichRun(3);
    });

    it('run at most pool size - 3 at once while a route waits in flight, whose listener holds a slot', async () => {
      await startApp(platform, 5, { storeTimeoutSeconds: 1 });
      await expectListenerHeld();
      await expectFiveHeldOfWhichRun(2);
    });

    it('leave no slot to a listener or a transaction that gave up waiting for one', async () => {
      await startApp(platform, 5, { storeTimeoutSeconds: 1, inFlightWaitSeconds: 1 });
      const held = await holdFive(); // two transactions gave up waiting
      // Its listener finds no slot before the wait is over; the waiter claims without it.
      await post('wait', randomUUID()).expect(201);
      gate.release();
      await Promise.all(held.answers);
      gate = new Gate();
      entered = 0;
      await post('wait', randomUUID()).expect(201);
      const { running, answers } = await holdFive();
      expect(running).toBe(2);
      gate.release();
      await Promise.all(answers);
    });
  });

  describe('a pool of three (one transaction slot)', () => {
    it('keeps its transaction slot for transactional routes once a route waits in flight: the listener takes a free connection', async () => {
      await startApp(platform, 3, { storeTimeoutSeconds: 1 });
      await expectListenerHeld();
      const answer = post('tx', randomUUID()).then((response) => response);
      await Promise.race([gate.reached, answer]); // refused at once (503) when it finds no slot
      gate.release();
      expect((await answer).status).toBe(201);
    });
  });
});
