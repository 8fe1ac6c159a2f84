import type { Server } from 'node:http';
import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { IdempotencySetupError } from '../src/index.js';
import { createSampleApp } from './create-sample-app.js';
import { startEmbeddedDatabase } from './embedded-database.js';
import { serveMetrics } from './metrics-exporter.js';
import { sampleConfigFromEnv } from './sample-config.js';

/** `npm start`: the charges app on PORT, on DATABASE_URL or else on an embedded PostgreSQL. */
async function main(): Promise<void> {
  const embedded = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedDatabase(
        fileURLToPath(new URL('../.data/postgres', import.meta.url)),
        Number(process.env.EMBEDDED_POSTGRES_PORT ?? 54320),
        true,
      );
  const config = sampleConfigFromEnv(process.env, process.env.DATABASE_URL ?? (embedded?.url as string));
  // The OpenTelemetry SDK is registered before the app is created, as OpenTelemetry asks.
  const metrics = config.metricsPort === undefined ? undefined : await serveMetrics(config.metricsPort);
  const app = await createSampleApp(config);
  // Graceful shutdown: `app.close()` first lets running charges finish and store their outcomes (the module's
  // shutdownTimeoutSeconds), then destroys the providers (the payment provider ends its pool), stops the server and
  // closes TypeORM's pool; the embedded database stops last. Apps without an embedded database can simply call
  // `app.enableShutdownHooks()`, which closes the app the same way.
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      console.log(`${signal}: shutting down`);
      app
        .close()
        .then(() => metrics?.shutdown())
        .then(() => embedded?.stop())
        .then(
          () => process.exit(0),
          (error: unknown) => {
            console.error(error);
            process.exit(1);
          },
        );
    });
  }
  // Fastify listens on localhost unless told otherwise; Express on every interface.
  await (config.platform === 'fastify' ? app.listen(config.port, '0.0.0.0') : app.listen(config.port));
  const address = (app.getHttpServer() as Server).address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const consuming = [
    ...(config.rabbitmq ? [`; payout requests from RabbitMQ queue ${config.rabbitmq.queue}`] : []),
    ...(config.jetstream ? [`; payout requests from JetStream stream ${config.jetstream.stream}`] : []),
    ...(config.metricsPort === undefined ? [] : [`; metrics on port ${config.metricsPort} at /metrics`]),
  ].join('');
  console.log(
    `Charges sample app listening on port ${port} (${config.platform}; database: ${embedded?.description ?? 'DATABASE_URL'}${consuming})`,
  );
}

main().catch((error: unknown) => {
  console.error(error);
  // The store's refusal names its own options; the sample app sets them from its environment.
  if (error instanceof IdempotencySetupError && error.message.includes('transaction pooler')) {
    console.error(
      'Behind a transaction pooler, start the sample app with DATABASE_TRANSACTION_POOLER=true and ' +
        'DATABASE_DIRECT_URL (a postgres:// URL straight to PostgreSQL): see "Behind PgBouncer" in docs/sample-app.md',
    );
  }
  process.exit(1);
});
