import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';

/** The HTTP platforms the module serves, by the name their Nest adapter gives (`httpAdapter.getType()`). */
export const SUPPORTED_HTTP_PLATFORMS = ['express', 'fastify'] as const;
export type HttpPlatformName = (typeof SUPPORTED_HTTP_PLATFORMS)[number];

/** The parts of a request the module reads, whatever the platform. */
export interface HttpRequest {
  method: string;
  /** The requested path with its query, as received (before routers strip their mount points). */
  url: string;
  headers: IncomingHttpHeaders;
  /** The template of the route it matched (`/v1/charges/:id`), when the platform tells it. */
  routePath: string | undefined;
  /** Set by Nest's body parsers when the application is created with `rawBody: true`. */
  rawBody: Buffer | undefined;
  /** A body parser of the application's own read the body (and kept no raw bytes, else `rawBody` is set). */
  bodyParsed: boolean;
}

/**
 * A response as the module handles it. Everything the module does to a response (capture it, hold it, replay,
 * answer for it, seal it) is done to the Node.js response under it, which every platform writes to in the end; what
 * the platform keeps apart from it is reached through the two methods here.
 */
export interface HttpResponse {
  /** What the platform hands to handlers and to its own `reply` (Express's response, Fastify's reply). */
  readonly platformResponse: object;
  /** The Node.js response it writes to (Express: the same object; Fastify: `reply.raw`). */
  readonly raw: ServerResponse;
  /**
   * Before the module writes the raw response itself (a replay, its own answer): the headers the platform keeps
   * apart until it sends (Fastify's reply headers, set by hooks or `@Header()`) go onto it, as on any response.
   */
  syncHeaders(): void;
  /** The response has been answered: the platform's own ways of sending a body do nothing from now on. */
  silence(): void;
}

/** What differs between Nest's HTTP platforms, as far as the module is concerned. */
export interface HttpPlatform {
  readonly name: HttpPlatformName;
  /** The request as the module reads it, from what Nest hands to guards and interceptors. */
  requestOf(request: object): HttpRequest;
  /** The response as the module handles it, from what Nest hands to guards and interceptors. */
  responseOf(response: object): HttpResponse;
  /**
   * The body the platform sends for a handler's value through Nest (the value is one `isSerializableBody` accepts),
   * with the Content-Type it gives it unless the route set one.
   */
  bodyForValue(value: unknown): { body: Buffer; contentType?: string };
}

/** The parts of an Express request the module reads. */
interface ExpressRequest extends IncomingMessage {
  method: string;
  url: string;
  originalUrl?: string;
  rawBody?: Buffer;
  /** Set by a body parser that read the body (Express 5 leaves it undefined otherwise). */
  body?: unknown;
  route?: { path?: string };
}

const expressPlatform: HttpPlatform = {
  name: 'express',
  requestOf(request) {
    const req = request as ExpressRequest;
    return {
      method: req.method,
      url: req.originalUrl ?? req.url,
      headers: req.headers,
      routePath: req.route?.path,
      rawBody: req.rawBody,
      bodyParsed: req.body !== undefined,
    };
  },
  responseOf(response) {
    const res = response as ServerResponse & { send?: unknown; json?: unknown };
    return {
      platformResponse: res,
      raw: res,
      syncHeaders: () => undefined,
      // Express's `send` and `json` (through which Nest sends a value) are skipped whole, so that nothing is
      // serialized or hashed for an answer that is not sent.
      silence() {
        if (typeof res.send === 'function') res.send = () => res;
        if (typeof res.json === 'function') res.json = () => res;
      },
    };
  },
  // Nest's ExpressAdapter.reply: nothing for null and undefined, JSON for objects, text for the rest.
  bodyForValue(value) {
    if (value === undefined || value === null) return { body: Buffer.alloc(0) };
    if (typeof value === 'object') {
      return { body: Buffer.from(JSON.stringify(value)), contentType: 'application/json; charset=utf-8' };
    }
    return {
      body: Buffer.from(String(value as string | number | boolean | bigint)),
      contentType: 'text/html; charset=utf-8',
    };
  },
};

/** The parts of a Fastify request (`FastifyRequest`) the module reads. */
interface FastifyRequestLike {
  method: string;
  url: string;
  originalUrl?: string;
  headers: IncomingHttpHeaders;
  routeOptions?: { url?: string };
  /** Set by the content type parsers of Nest's FastifyAdapter with `rawBody: true`. */
  rawBody?: Buffer;
}

/** The parts of a Fastify reply (`FastifyReply`) the module uses. */
interface FastifyReplyLike {
  raw: ServerResponse;
  send: (payload?: unknown) => unknown;
  getHeaders(): OutgoingHttpHeaders;
}

const fastifyPlatform: HttpPlatform = {
  name: 'fastify',
  requestOf(request) {
    const req = request as FastifyRequestLike;
    return {
      method: req.method,
      url: req.originalUrl ?? req.url,
      headers: req.headers,
      routePath: req.routeOptions?.url,
      rawBody: req.rawBody,
      // Fastify parses `text/plain` itself, which no application asked for: a body the module does not fingerprint
      // is unsupported (415) as on Express, and JSON or form bodies without their raw bytes are a set-up mistake.
      bodyParsed: false,
    };
  },
  responseOf(response) {
    const reply = response as FastifyReplyLike;
    const raw = reply.raw;
    return {
      platformResponse: reply,
      raw,
      syncHeaders() {
        if (raw.headersSent) return;
        // The reply's headers, over the raw response's (what Fastify itself sends).
        for (const [name, value] of Object.entries(reply.getHeaders())) {
          if (value !== undefined) raw.setHeader(name, value);
        }
      },
      // Fastify would serialize the value and run the onSend hooks for nothing, and warn that it was sent twice.
      silence() {
        reply.send = () => reply;
      },
    };
  },
  // Fastify's reply.send: nothing for undefined, text for strings, bytes as they are, JSON for the rest (null too).
  bodyForValue(value) {
    if (value === undefined) return { body: Buffer.alloc(0) };
    if (typeof value === 'string') return { body: Buffer.from(value), contentType: 'text/plain; charset=utf-8' };
    if (value instanceof Uint8Array) {
      return {
        body: Buffer.from(value.buffer, value.byteOffset, value.byteLength),
        contentType: 'application/octet-stream',
      };
    }
    return { body: Buffer.from(JSON.stringify(value)), contentType: 'application/json; charset=utf-8' };
  },
};

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
