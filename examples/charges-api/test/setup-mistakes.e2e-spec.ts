import { Test } from '@nestjs/testing';
import { IdempotencySetupError } from 'nest-idempotency';
import { AppModule } from '../src/app.module.js';
import { createTestDatabase, type TestDatabase } from './support.js';

describe('set-up mistakes', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase();
    process.env.DATABASE_URL = database.url;
  });

  afterAll(async () => {
    await database?.drop();
  });

  it('refuses to start an application created without rawBody: true, naming the fix', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    const app = moduleRef.createNestApplication();
    try {
      const started = app.init();
      await expect(started).rejects.toBeInstanceOf(IdempotencySetupError);
      await expect(started).rejects.toThrow(/rawBody: true/);
    } finally {
      await app.close();
    }
  });
});
