import { randomUUID } from 'node:crypto';
import { type ArgumentsHost, Body, Catch, Controller, type ExceptionFilter, HttpException, Post } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import type { Response } from 'express';
import request from 'supertest';
import {
  IdempotencyError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyReuseError,
  Idempotent,
} from '../../src/index.js';
import { describeOnStores } from '../support/on-each-store.js';
import { recordsOn, useTestApp } from '../support/test-app.js';
import { useTestDatabase } from '../support/test-database.js';

@Controller('orders')
class OrdersController {
  @Post()
  @Idempotent()
  create(@Body() body: unknown) {
    return { received: body };
  }
}

/** An application's own filter, as many have: it sees the module's refusals as HTTP errors, and answers its way. */
@Catch(HttpException)
class ApplicationFilter implements ExceptionFilter {
  readonly seen: HttpException[] = [];

  catch(exception: HttpException, host: ArgumentsHost): void {
    this.seen.push(exception);
    const refusal = exception.cause instanceof IdempotencyError ? exception.cause.code : 'other';
    host.switchToHttp().getResponse<Response>().status(exception.getStatus()).json({ refusal });
  }
}

const db = useTestDatabase();

describeOnStores('records on %s', (store) => {
  const filter = new ApplicationFilter();
  const server = useTestApp(() => ({
    ...recordsOn(store),
    database: db,
    idempotency: { singleTenant: true },
    controllers: [OrdersController],
    providers: [{ provide: APP_FILTER, useValue: filter }],
    listen: false,
  }));
  const app = { getHttpServer: () => server.app.getHttpServer() };

  describe("the module's refusals on HTTP", () => {
    it('reach exception filters as HttpExceptions whose cause is the refusal', async () => {
      const key = randomUUID();
      await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ n: 1 }).expect(201);
      const reuse = await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', key).send({ n: 2 });
      const missing = await request(app.getHttpServer()).post('/orders').send({ n: 1 });

      expect([reuse.status, reuse.body]).toEqual([422, { refusal: 'idempotency_key_reuse' }]);
      expect([missing.status, missing.body]).toEqual([400, { refusal: 'idempotency_key_required' }]);
      const [reuseSeen, missingSeen] = filter.seen;
      expect(reuseSeen.cause).toBeInstanceOf(IdempotencyKeyReuseError);
      expect(reuseSeen.getResponse()).toEqual({
        statusCode: 422,
        error: 'idempotency_key_reuse',
        message: (reuseSeen.cause as Error).message,
      });
      expect(missingSeen.cause).toBeInstanceOf(IdempotencyKeyRequiredError);
    });
  });
});

describe("the module's refusals, thrown", () => {
  it('are plain errors with a code, not HTTP exceptions, where they are thrown (execute(), a store of your own)', () => {
    const refusal = new IdempotencyKeyReuseError({ key: 'key of operation "payout"', usedWith: 'input' });
    expect(refusal).not.toBeInstanceOf(HttpException);
    expect([refusal.name, refusal.code]).toEqual(['IdempotencyKeyReuseError', 'idempotency_key_reuse']);
  });
});
