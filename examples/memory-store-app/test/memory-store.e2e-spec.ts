import { createRequire } from 'node:module';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { AppModule, JobsController } from '../src/app.module.js';

// The package installed from its tarball into an application that has neither TypeORM nor pg: npm leaves optional
// peer dependencies out, and the main entry point loads neither.
let app: INestApplication;

beforeAll(async () => {
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  app = moduleRef.createNestApplication({ rawBody: true, logger: ['error'] });
  await app.init();
});

afterAll(async () => {
  await app?.close();
});

it('has no TypeORM, @nestjs/typeorm or pg installed', () => {
  const resolve = createRequire(import.meta.url).resolve;
  for (const name of ['typeorm', '@nestjs/typeorm', 'pg']) expect(() => resolve(name)).toThrow(/Cannot find module/);
});

it('runs a key once and replays its outcome, and refuses the key with another body', async () => {
  const send = (name: string) =>
    request(app.getHttpServer()).post('/jobs').set('Idempotency-Key', 'job-1').send({ name });
  const first = await send('nightly');
  expect(first.status).toBe(201);
  const replay = await send('nightly');
  expect(replay.status).toBe(201);
  expect(replay.headers['idempotent-replay']).toBe('true');
  expect(replay.text).toBe(first.text);
  expect((await send('weekly')).body).toMatchObject({ statusCode: 422, error: 'idempotency_key_reuse' });
  expect(app.get(JobsController).runs).toBe(1);
});
