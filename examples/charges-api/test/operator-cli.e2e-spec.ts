import { execFile } from 'node:child_process';
import type { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { createTestDatabase, startApp, type TestDatabase } from './support.js';

/** The package's command, as `npx nest-idempotency` runs it in this application: installed from the tarball. */
function nestIdempotency(args: string[], databaseUrl: string): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve) => {
    execFile(
      'npx',
      ['--no-install', 'nest-idempotency', ...args],
      { env: { ...process.env, DATABASE_URL: databaseUrl } },
      (error, stdout) => resolve({ code: error ? Number(error.code) : 0, stdout }),
    );
  });
}

describe('npx nest-idempotency, installed with the package', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase();
    ({ app } = await startApp(database.url));
  });

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it("inspects a charge's record, lists none stuck, and answers 1 for a key it does not know", async () => {
    const charge = await request(app.getHttpServer())
      .post('/charges')
      .set('X-Account', 'acct_cli')
      .set('Idempotency-Key', 'order-cli')
      .send({ amount: 1200, currency: 'eur' });
    expect(charge.status).toBe(201);

    const inspect = await nestIdempotency(['inspect', '--key', 'order-cli', '--json'], database.url);
    expect(inspect.code).toBe(0);
    expect(JSON.parse(inspect.stdout)).toEqual([
      expect.objectContaining({ account: 'acct_cli', key: 'order-cli', state: 'completed', responseStatus: 201 }),
    ]);
    expect(await nestIdempotency(['stuck', '--json'], database.url)).toEqual({ code: 0, stdout: '[]\n' });
    expect((await nestIdempotency(['inspect', '--key', 'no-such-key'], database.url)).code).toBe(1);
  });
});
