import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { HttpPlatform } from './http-platform.js';

/** The parts of a Fastify request (`FastifyRequest`) the module reads. */
interface FastifyRequestLike {
  method: string;
  url: string;
  originalUrl?: string;
  headers: IncomingHttpHeaders;
  routeOptions?: { url?: string };
  /** Set by the content type parsers of Nest's FastifyAdapter with `rawBody: true`. */
  rawBody?: Buffer;
  /** What a content type parser made of the body; undefined when the request has none (no parser ran). */
  body?: unknown;
}

/** The parts of a Fastify reply (`FastifyReply`) the module uses. */
interface FastifyReplyLike {
  raw: ServerResponse;
  send: (payload?: unknown) => unknown;
  getHeaders(): OutgoingHttpHeaders;
}

/**
 * A content type parser of the application read the body. Fastify runs a parser for every request with a body (and
 * refuses the types it has none for with its own 415), so a body is parsed whenever it is there. One parser is not
 * the application's: Fastify's own for `text/plain`, which no application asked for and which gives the text as a
 * string; a text/plain body it read is unsupported (415) as on Express. (An application's own text/plain parser that
 * gives a string cannot be told from it, and is answered the same.)
 */
function parsedByApplication(request: FastifyRequestLike): boolean {
  if (request.body === undefined) return false;
  const mediaType = (request.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
  return !(mediaType === 'text/plain' && typeof request.body === 'string');
}

/** Nest's Fastify platform: the reply keeps its own headers, and writes to the Node.js response (`reply.raw`) in the end. */
export const fastifyPlatform: HttpPlatform = {
  name: 'fastify',
  requestOf(request) {
    const req = request as FastifyRequestLike;
    return {
      method: req.method,
      url: req.originalUrl ?? req.url,
      headers: req.headers,
      routePath: req.routeOptions?.url,
      rawBody: req.rawBody,
      bodyParsed: parsedByApplication(req),
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
