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
}

/** The parts of a Fastify reply (`FastifyReply`) the module uses. */
interface FastifyReplyLike {
  raw: ServerResponse;
  send: (payload?: unknown) => unknown;
  getHeaders(): OutgoingHttpHeaders;
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
