import type { LoggerService, LogLevel } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { DataSource } from 'typeorm';
import { AppModule } from './app.module.js';
import type { PaymentProvider } from './payment-provider.js';
import type { SampleConfig } from './sample-config.js';

/** Any number taken once by every instance of the app; holders of the lock run the migrations one at a time. */
const MIGRATION_LOCK = 7_406_001;

export interface SampleAppOptions {
  logger?: LoggerService | LogLevel[] | false;
  paymentProvider?: PaymentProvider;
}

/** Builds the charges app and brings its schema up to date; `listen()` is the caller's. */
export async function createSampleApp(
  config: SampleConfig,
  options: SampleAppOptions = {},
): Promise<NestExpressApplication> {
  const app = await NestFactory.create<NestExpressApplication>(AppModule.forRoot(config, options.paymentProvider), {
    // The fingerprint hashes the body bytes as received.
    rawBody: true,
    logger: options.logger,
  });
  await runMigrations(app.get(DataSource));
  return app;
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
