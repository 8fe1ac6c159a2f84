import type { IncomingHttpHeaders, ServerResponse } from 'node:http';

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
  /**
   * At start-up, on the platform's own instance (`httpAdapter.getInstance()`): a request carrying `keyHeaderName`
   * whose body the platform refuses as too large (413) has its body read to its end before the answer, so that a
   * client still sending it reads the 413 rather than a reset connection.
   */
  readRefusedBodies(instance: object, keyHeaderName: string): void;
}
