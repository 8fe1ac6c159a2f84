import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { INestApplication, NestApplicationOptions } from '@nestjs/common';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { TestingModule } from '@nestjs/testing';

/** The HTTP platforms the module serves; e2e suites of the HTTP edge run on each. */
export const PLATFORMS = ['express', 'fastify'] as const;
export type Platform = (typeof PLATFORMS)[number];

/** The application of `moduleRef` on `platform`: Nest's default Express, or Fastify (with `fastifyOptions`). */
export function createPlatformApp(
  moduleRef: TestingModule,
  platform: Platform,
  options: NestApplicationOptions,
  /** Fastify's own options (`handlerTimeout`, `bodyLimit`), on Fastify. */
  fastifyOptions?: ConstructorParameters<typeof FastifyAdapter>[0],
): INestApplication {
  return platform === 'fastify'
    ? moduleRef.createNestApplication(new FastifyAdapter(fastifyOptions), options)
    : moduleRef.createNestApplication(options);
}

/**
 * What Express's response and Fastify's reply have in common, for handlers that take their response (`@Res()`):
 * `send` sends an object as JSON on both.
 */
export interface PlatformResponse {
  status(code: number): this;
  header(name: string, value: string): this;
  type(contentType: string): this;
  send(body?: unknown): this;
}

/** What Express's request and Fastify's request have in common, for handlers that take theirs (`@Req()`). */
export interface PlatformRequest {
  socket: Socket;
  headers: IncomingHttpHeaders;
}

/** A request header's value as one string (both platforms keep Node's lower-cased headers). */
export function headerOf(request: PlatformRequest, name: string): string | undefined {
  const value = request.headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * The Node.js response under a platform's response, for handlers that write their answer themselves
 * (`writeHead`, `write`, `end`, `flushHeaders`): Express's response is one, Fastify's reply has it as `raw`.
 */
export function rawResponseOf(response: PlatformResponse): ServerResponse {
  return 'raw' in response ? (response as { raw: ServerResponse }).raw : (response as unknown as ServerResponse);
}
