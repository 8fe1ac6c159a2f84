import { type HttpServer, Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { IDEMPOTENT_ROUTES_TRACKED } from '../http.constants.js';
import { IdempotencySetupError } from '../../protocol/idempotency-setup.error.js';
import { RAW_BODY_SETTING } from '../requests/http-request-reading.js';
import { isSupportedHttpPlatform } from './http-platforms.js';

/**
 * The adapter's methods that register body parsers, handing them the application's `rawBody` option second: on
 * Express and on Fastify alike (`registerParserMiddleware(prefix, rawBody)`, `useBodyParser(type, rawBody, …)`).
 */
type BodyParserRegistrations = Pick<HttpServer, 'registerParserMiddleware' | 'useBodyParser'>;

/**
 * Refuses to start an HTTP application the module cannot serve: one on another platform than Express or Fastify
 * (whose idempotent requests would all fail), or one whose body parsers keep no raw bytes (created without `rawBody: true`,
 * so that no request with a body could be fingerprinted). An application without idempotent routes (a worker, or an
 * API that only calls `IdempotencyService.execute()`) is not checked.
 */
@Injectable()
export class HttpPlatformCheck implements OnModuleInit {
  /** The `rawBody` option Nest registered its body parsers with, once it has. */
  private parsersKeepRawBody?: boolean;

  constructor(
    private readonly adapterHost: HttpAdapterHost,
    @Inject(IDEMPOTENT_ROUTES_TRACKED) private readonly idempotentRoutes: number,
  ) {
    // Nest does not keep its `rawBody` option where a provider can read it: it hands it to the adapter when it
    // registers the body parsers, in `init()`, after the adapter is set (in tests, after the providers are created).
    adapterHost.init$.subscribe(() => this.watchBodyParsers(adapterHost.httpAdapter));
  }

  onModuleInit(): void {
    const adapter = this.adapterHost.httpAdapter;
    if (!adapter || this.idempotentRoutes === 0) return;
    const platform = adapter.getType();
    if (!isSupportedHttpPlatform(platform)) {
      throw new IdempotencySetupError(
        'IdempotencyModule supports the Express and Fastify platforms (@nestjs/platform-express, ' +
          `@nestjs/platform-fastify), and this application runs on ${platform}: create it with one of their adapters ` +
          '(`IdempotencyService.execute()` works on any platform, in an application without `@Idempotent()` routes).',
      );
    }
    if (this.parsersKeepRawBody === false) {
      throw new IdempotencySetupError(
        'IdempotencyModule fingerprints the raw body bytes of requests, and this application was created without ' +
          `\`rawBody: true\`: create it with ${RAW_BODY_SETTING}.`,
      );
    }
  }

  private watchBodyParsers(adapter: BodyParserRegistrations | undefined): void {
    if (!adapter) return;
    // The parsers Nest registers itself, and those of `app.useBodyParser()`.
    for (const method of ['registerParserMiddleware', 'useBodyParser'] as const) {
      const register = adapter[method];
      if (!register) continue;
      adapter[method] = (first: unknown, rawBody?: unknown, ...rest: unknown[]) => {
        this.parsersKeepRawBody = rawBody === true;
        return register.call(adapter, first, rawBody, ...rest) as unknown;
      };
    }
  }
}
