import { IdempotencySetupError } from '../../protocol/idempotency-setup.error.js';
import { expressPlatform } from './express-platform.js';
import { fastifyPlatform } from './fastify-platform.js';
import { type HttpPlatform, type HttpPlatformName, SUPPORTED_HTTP_PLATFORMS } from './http-platform.js';

const PLATFORMS: Record<HttpPlatformName, HttpPlatform> = { express: expressPlatform, fastify: fastifyPlatform };

export function isSupportedHttpPlatform(name: string): name is HttpPlatformName {
  return (SUPPORTED_HTTP_PLATFORMS as readonly string[]).includes(name);
}

/** The platform of an adapter, by its `getType()`; the module refuses to start on others (`HttpPlatformCheck`). */
export function httpPlatformFor(name: string): HttpPlatform {
  if (!isSupportedHttpPlatform(name)) {
    throw new IdempotencySetupError(
      `IdempotencyModule supports the Express and Fastify platforms, and this application runs on ${name}.`,
    );
  }
  return PLATFORMS[name];
}
