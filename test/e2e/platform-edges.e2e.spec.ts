import { randomUUID } from 'node:crypto';
import { Controller, type INestApplication, Post, Res, Version, VersioningType } from '@nestjs/common';
import request from 'supertest';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS } from '../support/platforms.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { describeOnStores } from '../support/on-each-store.js';
import { recordsOn, startTestApp } from '../support/test-app.js';

// Review of issue 11 (adversarial): edges of the HTTP platforms that the other suites do not reach.

/** Two versions of one path: Nest routes them by a header, and they are two different operations. */
@Controller('versioned')
@Idempotent()
class VersionedController {
  runs = { v1: 0, v2: 0 };

  @Post()
  @Version('1')
  createV1() {
    return { version: 1, run: (this.runs.v1 += 1) };
  }

  @Post()
  @Version('2')
  createV2() {
    return { version: 2, run: (this.runs.v2 += 1) };
  }
}

/** Fastify's idiom `return reply.send(value)`: the handler returns the reply, which is a thenable. */
@Controller('returns-reply')
class ReturnsReplyController {
  runs = 0;

  @Post()
  @Idempotent({ required: false })
  create(@Res({ passthrough: true }) reply: { code(status: number): { send(body: unknown): unknown } }) {
    return reply.code(200).send({ run: (this.runs += 1) });
  }

  @Post('own')
  @Idempotent({ required: false })
  createOwn(@Res() reply: { code(status: number): { send(body: unknown): unknown } }) {
    return reply.code(200).send({ run: (this.runs += 1) });
  }
}

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

describeOnStores('records on %s', (store) => {
  describe.each(PLATFORMS)('on %s', (platform) => {
    describe('header versioning (app.enableVersioning({ type: HEADER }))', () => {
      let app: INestApplication;
      let url: string;

      beforeAll(async () => {
        ({ app, url } = await startTestApp({
          ...recordsOn(store),
          platform,
          database: db,
          idempotency: { singleTenant: true },
          controllers: [VersionedController],
          configure: (app) => app.enableVersioning({ type: VersioningType.HEADER, header: 'X-API-Version' }),
        }));
      });

      afterAll(async () => {
        await app?.close();
      });

      // Both versions have one route template (`POST /versioned`), which is all the scope's endpoint holds, and the
      // fingerprint (method, path, query, content type, body) does not see the version header: a key first used on v1
      // is "replayed" to v2 with v1's response, and v2's handler never runs. Two routes must never share a scope:
      // v2 should run (its own scope), or at least be refused (422) — never answered with another route's outcome.
      it('a key used on v1 is not answered with v1 outcome on v2', async () => {
        const key = randomUUID();
        const post = (version: string) =>
          request(url).post('/versioned').set('X-API-Version', version).set('Idempotency-Key', key).send({ amount: 1 });
        const v1 = await post('1').expect(201);
        expect(v1.body).toEqual({ version: 1, run: 1 });
        const v2 = await post('2').expect(201);
        expect(v2.headers['idempotent-replay']).toBeUndefined();
        expect(v2.body).toEqual({ version: 2, run: 1 });
        // Each version keeps its own outcome for the key.
        expect((await post('1').expect(201)).body).toEqual({ version: 1, run: 1 });
        expect((await post('2').expect(201)).body).toEqual({ version: 2, run: 1 });
      });
    });
  });

  describe('on fastify, a passthrough handler that returns reply.send(…) (a thenable that settles once the response is sent)', () => {
    let app: INestApplication;
    let url: string;

    beforeAll(async () => {
      ({ app, url } = await startTestApp({
        ...recordsOn(store),
        platform: 'fastify',
        database: db,
        idempotency: { singleTenant: true },
        controllers: [ReturnsReplyController],
      }));
    });

    afterAll(async () => {
      await app?.close();
    });

    it('without a key (the module steps aside), answers', async () => {
      const response = await request(url).post('/returns-reply').send({ amount: 1 }).timeout(3000).expect(200);
      expect(response.body).toEqual({ run: 1 });
    });

    // Nest awaits the returned reply (Fastify's reply is thenable: it settles on the raw response's 'finish'), while
    // the module holds that response's end until the handler's pipeline has ended: neither ever goes on. The client
    // waits forever, the lease is renewed for maxHoldSeconds, and the key is stuck in progress (409) meanwhile.
    it('with a key, answers, and the retry is replayed', async () => {
      const key = randomUUID();
      const post = () =>
        request(url).post('/returns-reply').set('Idempotency-Key', key).send({ amount: 1 }).timeout(3000);
      const first = await post().expect(200);
      const retry = await post().expect(200);
      expect(retry.headers['idempotent-replay']).toBe('true');
      expect(retry.body).toEqual(first.body);
    });

    it('with @Res() (not stored), answers', async () => {
      await request(url).post('/returns-reply/own').set('Idempotency-Key', randomUUID()).timeout(3000).expect(200);
    });
  });
});
