import type { INestApplication, LoggerService, LogLevel } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { DataSource } from 'typeorm';
import { serveApiDocs } from './api-docs.js';
import { AppModule, SAMPLE_MIGRATIONS } from './app.module.js';
import { payoutBrokers } from './brokers/payout-brokers.js';
import type { PaymentProvider } from './payment-provider.js';
import type { SampleConfig } from './sample-config.js';

/** Any number taken once by every instance of the app; holders of the lock run the migrations one at a time. */
const MIGRATION_LOCK = 7_406_001;

/** Express's body parsers refuse bodies over 100 KiB by default, Fastify's over 1 MiB: the app answers 413 alike. */
const BODY_LIMIT_BYTES = 100 * 1024;

export interface SampleAppOptions {
  logger?: LoggerService | LogLevel[] | false;
  paymentProvider?: PaymentProvider;
}

/**
 * Builds the charges app, on Express or on Fastify (`config.platform`), brings its schema up to date, and starts
 * consuming payout requests from the brokers `config` names; `listen()` is the caller's.
 */
export async function createSampleApp(config: SampleConfig, options: SampleAppOptions = {}): Promise<INestApplication> {
  const module = AppModule.forRoot(config, options.paymentProvider);
  // The fingerprint hashes the body bytes as received: `rawBody: true` on either platform.
  const appOptions = { rawBody: true, logger: options.logger };
  const app =
    config.platform === 'fastify'
      ? await NestFactory.create(module, new FastifyAdapter({ bodyLimit: BODY_LIMIT_BYTES }), appOptions)
      : await NestFactory.create(module, appOptions);
  serveApiDocs(app, config);
  if (config.databaseDirectUrl === undefined) await runMigrations(app.get(DataSource));
  else await runMigrationsOver(config.databaseDirectUrl);
  // After the migrations: a message may arrive as soon as its consumer starts.
  for (const broker of payoutBrokers(config)) await broker.connect(app);
  await app.startAllMicroservices();
  return app;
}

/**
 * The migrations on a short-lived data source of their own, straight to PostgreSQL at `directUrl`: behind a
 * transaction pooler, the app's data source would hold the migrations' session advisory lock on a server connection
 * other clients share, and let it go (or keep it) with whichever transaction came next.
 */
async function runMigrationsOver(directUrl: string): Promise<void> {
  const dataSource = new DataSource({ type: 'postgres', url: directUrl, migrations: SAMPLE_MIGRATIONS });
  await dataSource.initialize();
  try {
    await runMigrations(dataSource);
  } finally {
    await dataSource.destroy();
  }
}

/** Several instances may start at once against one database: an advisory lock serialises their migrations. */
export async function runMigrations(dataSource: DataSource): Promise<void> {
  const lockHolder = dataSource.createQueryRunner();
  await lockHolder.connect();
  try {
    await lockHolder.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await dataSource.runMigrations({ transaction: 'each' });
  } finally {
    await lockHolder.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    await lockHolder.release();
  }
}
