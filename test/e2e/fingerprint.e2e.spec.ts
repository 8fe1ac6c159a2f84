import { randomUUID } from 'node:crypto';
import { Body, Controller, Post } from '@nestjs/common';
import request from 'supertest';
import { Idempotent } from '../../src/index.js';
import { jsonFieldsFingerprint } from '../../src/http/index.js';
import { describeOnStores } from '../support/on-each-store.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { recordsOf, recordsOn, useTestApp } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';

/** Every route answers with how many times its handler ran, so a replay shows the first run's number. */
@Controller('orders')
class OrdersController {
  private readonly runs = new Map<string, number>();

  private run(route: string, body: unknown) {
    const run = (this.runs.get(route) ?? 0) + 1;
    this.runs.set(route, run);
    return { run, received: body };
  }

  runsOf(route: string): number {
    return this.runs.get(route) ?? 0;
  }

  /** The route's own fingerprint, which replaces the module's. */
  @Post('excluding')
  @Idempotent({ fingerprint: jsonFieldsFingerprint({ exclude: ['metadata.requestedAt'] }) })
  excluding(@Body() body: unknown) {
    return this.run('excluding', body);
  }

  @Post('including')
  @Idempotent({ fingerprint: jsonFieldsFingerprint({ include: ['amount', 'customer.id'] }) })
  including(@Body() body: unknown) {
    return this.run('including', body);
  }

  /** The module's fingerprint. */
  @Post('module-wide')
  @Idempotent()
  moduleWide(@Body() body: unknown) {
    return this.run('module-wide', body);
  }
}

const db = useTestDatabase();

const order = {
  amount: 1200,
  customer: { id: 'cus_1', name: 'Ada' },
  metadata: { requestedAt: '2026-01-01T10:00:00Z', orderId: 'o-42' },
  traceId: 't-1',
};

describeOnStores('records on %s', (store) => {
  const logger = new RecordingLogger();
  const server = useTestApp(() => ({
    ...recordsOn(store),
    database: db,
    idempotency: { singleTenant: true, fingerprint: jsonFieldsFingerprint({ exclude: ['traceId'] }) },
    controllers: [OrdersController],
    logger,
  }));
  const records = recordsOf(server, db);

  const send = (route: string, key: string, body: string | object, contentType = 'application/json') =>
    request(server.url)
      .post(`/orders/${route}`)
      .set('Idempotency-Key', key)
      .set('Content-Type', contentType)
      .send(typeof body === 'string' ? body : JSON.stringify(body));

  describe('a route fingerprinted on chosen JSON fields', () => {
    it('replays a retry whose excluded field changed (and whose keys moved): the handler ran once', async () => {
      const key = randomUUID();
      const first = await send('excluding', key, order).expect(201);
      expect(first.body).toEqual({ run: 1, received: order });
      const retried = `{"traceId":"t-1","metadata":{"orderId":"o-42","requestedAt":"2026-01-01T10:00:07Z"},
        "customer":{"name":"Ada","id":"cus_1"},"amount":1200}`;
      const replay = await send('excluding', key, retried).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text); // the first attempt's response, its requestedAt included
      expect(server.app.get(OrdersController).runsOf('excluding')).toBe(1);
    });

    it.each([
      ['a field of the operation', { ...order, amount: 1300 }],
      ['a field next to the excluded one', { ...order, metadata: { ...order.metadata, orderId: 'o-43' } }],
      ["a field only the module's fingerprint excludes", { ...order, traceId: 't-2' }],
    ])('refuses a retry in which %s changed: 422 idempotency_key_reuse', async (_case, changed) => {
      const key = randomUUID();
      await send('excluding', key, order).expect(201);
      const runs = server.app.get(OrdersController).runsOf('excluding');
      const reuse = await send('excluding', key, changed).expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
      expect(server.app.get(OrdersController).runsOf('excluding')).toBe(runs);
    });

    it('tells an amount of 1e400 from null and -1e400 (the handler gets Infinity, null, -Infinity): 422', async () => {
      const key = randomUUID();
      const withAmount = (amount: string) => `{"amount":${amount},"customer":{"id":"cus_1"}}`;
      const first = await send('excluding', key, withAmount('1e400')).expect(201);
      const runs = server.app.get(OrdersController).runsOf('excluding');
      for (const other of ['null', '-1e400']) {
        const reuse = await send('excluding', key, withAmount(other)).expect(422);
        expect(reuse.body.error).toBe('idempotency_key_reuse');
      }
      const replay = await send('excluding', key, withAmount('1e400')).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      expect(server.app.get(OrdersController).runsOf('excluding')).toBe(runs);
    });

    it('with include, replays a retry whose other fields changed and refuses one whose included field changed', async () => {
      const key = randomUUID();
      const first = await send('including', key, order).expect(201);
      const others = { ...order, customer: { id: 'cus_1', name: 'Ada L.' }, metadata: {}, traceId: 't-9' };
      const replay = await send('including', key, others).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      const reuse = await send('including', key, { ...order, customer: { id: 'cus_2', name: 'Ada' } }).expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
      expect(server.app.get(OrdersController).runsOf('including')).toBe(1);
    });

    it("uses the module's fingerprint on routes without their own", async () => {
      const key = randomUUID();
      const first = await send('module-wide', key, order).expect(201);
      const replay = await send('module-wide', key, { ...order, traceId: 't-2' }).expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      const reuse = await send('module-wide', key, { ...order, metadata: { ...order.metadata, requestedAt: 'later' } });
      expect(reuse.status).toBe(422);
      expect(server.app.get(OrdersController).runsOf('module-wide')).toBe(1);
    });

    it('compares a form body byte for byte: a retry with any field changed is refused, never replayed', async () => {
      const key = randomUUID();
      const form = 'amount=1200&requestedAt=2026-01-01T10%3A00%3A00Z';
      const first = await send('excluding', key, form, 'application/x-www-form-urlencoded').expect(201);
      const replay = await send('excluding', key, form, 'application/x-www-form-urlencoded').expect(201);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.text).toBe(first.text);
      const changed = 'amount=1200&requestedAt=2026-01-01T10%3A00%3A07Z';
      const reuse = await send('excluding', key, changed, 'application/x-www-form-urlencoded').expect(422);
      expect(reuse.body.error).toBe('idempotency_key_reuse');
    });

    it("never sees a body that is not JSON: Nest's body parser answers 400 first, and nothing is claimed", async () => {
      const key = randomUUID();
      const runs = server.app.get(OrdersController).runsOf('excluding');
      const malformed = await send('excluding', key, '{"amount":1200,').expect(400);
      expect(malformed.body.error).not.toBe('idempotency_key_reuse');
      expect(await records.of(key)).toBeUndefined();
      expect(server.app.get(OrdersController).runsOf('excluding')).toBe(runs);
      const corrected = await send('excluding', key, order).expect(201);
      expect(corrected.headers['idempotent-replay']).toBeUndefined();
      expect(logger.errors).toEqual([]);
    });
  });
});
