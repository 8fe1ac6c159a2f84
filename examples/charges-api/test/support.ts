import 'reflect-metadata';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { AppModule } from '../src/app.module.js';
import { PaymentProvider } from '../src/payment-provider.js';

/** The server the tests make their databases on (read before a test points DATABASE_URL at its own database). */
const serverUrl = process.env.DATABASE_URL;

export interface TestDatabase {
  url: string;
  /** Opens a client of this database; the caller ends it. */
  connect(): Promise<pg.Client>;
  drop(): Promise<void>;
}

/** A database of this test file's own, so that runs (and test files) never see each other's rows. */
export async function createTestDatabase(): Promise<TestDatabase> {
  if (!serverUrl) throw new Error('Set DATABASE_URL to a PostgreSQL server the tests may create databases on');
  const name = `charges_api_test_${randomBytes(6).toString('hex')}`;
  await withClient(serverUrl, (client) => client.query(`CREATE DATABASE ${name}`));
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async connect() {
      const client = new pg.Client({ connectionString: url.toString() });
      await client.connect();
      return client;
    },
    drop: () => withClient(serverUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
  };
}

async function withClient(url: string, work: (client: pg.Client) => Promise<unknown>): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await work(client);
  } finally {
    await client.end();
  }
}

export interface TestApp {
  app: INestApplication;
  provider: PaymentProvider;
}

/** The application as main.ts makes it (rawBody: true), on the given database. */
export async function startApp(databaseUrl: string, env: Record<string, string> = {}): Promise<TestApp> {
  // AppModule reads its settings through @nestjs/config, which reads the environment (this test file's copy).
  Object.assign(process.env, env, { DATABASE_URL: databaseUrl });
  const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
  const app = moduleRef.createNestApplication({ rawBody: true });
  app.enableShutdownHooks();
  await app.init();
  return { app, provider: app.get(PaymentProvider) };
}
