import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import type { ApiIdempotentOptions } from '../src/swagger/index.js';
import { profileFromEnv, type SampleConfig } from './sample-config.js';

/**
 * What the OpenAPI document says of the idempotent routes: the profile the app answers in. Decorators are evaluated
 * when their file is imported, before any config is made, so it is read from the environment as the config reads it.
 */
export const IDEMPOTENCY_DOCS: ApiIdempotentOptions = { profile: profileFromEnv(process.env) };

/**
 * The OpenAPI document at `/docs-json`, and its UI at `/docs` on Express. Fastify's UI needs `@fastify/static`,
 * which the sample does not install: on Fastify only the document is served.
 */
export function serveApiDocs(app: INestApplication, config: SampleConfig): void {
  const document = new DocumentBuilder()
    .setTitle('nest-idempotency sample')
    .setDescription('Charges, refunds and payouts, safe to retry with an Idempotency-Key.')
    .addBearerAuth()
    .build();
  SwaggerModule.setup('docs', app, () => SwaggerModule.createDocument(app, document), {
    ui: config.platform === 'express',
    raw: ['json'],
    jsonDocumentUrl: 'docs-json',
  });
}
