import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { HttpPlatform } from './http-platform.js';
import { type NoOpMethods, silenceMethods } from './silenced-methods.js';

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
  getHeaders(): OutgoingHttpHeaders;
}

/** Fastify's way of sending a body, through which Nest sends a value. */
const FASTIFY_SEND: NoOpMethods = {
  send(this: object) {
    return this;
  },
};

/** The part of a Fastify instance the module hooks into at start-up. */
interface FastifyInstanceLike {
  addHook(
    name: 'onError',
    hook: (
      request: { headers: IncomingHttpHeaders; raw: IncomingMessage },
      reply: unknown,
      error: unknown,
    ) => Promise<void>,
  ): unknown;
}

/** Fastify's error for a body over its `bodyLimit` (or a route's), which it answers with 413. */
const BODY_TOO_LARGE = 'FST_ERR_CTP_BODY_TOO_LARGE';

/** The instances whose refused bodies are read already (one hook each, whatever starts twice). */
const readingRefusedBodies = new WeakSet<object>();

/**
 * How much of a refused body is read, and for how long, before the 413 goes out anyway (and Fastify closes the
 * connection with the rest unread): any client may send the key header, and Fastify sets no request timeout by
 * default, so an unbounded read would let one hold a request open, or make the server take in any amount.
 */
const DISCARDED_BODY_MAX_BYTES = 16 * 1024 * 1024;
const DISCARDED_BODY_MAX_MS = 5_000;

/**
 * Resolves once the request's body has been read to its end (and thrown away), or its connection has gone, or the
 * bounds above are reached (at once for a body that declares a larger length).
 */
function bodyDiscarded(raw: IncomingMessage): Promise<void> {
  const declared = Number(raw.headers['content-length'] ?? 0);
  if (raw.complete || raw.destroyed || declared > DISCARDED_BODY_MAX_BYTES) return Promise.resolve();
  return new Promise((resolve) => {
    let read = 0;
    const done = () => {
      clearTimeout(timer);
      raw.off('data', counted).off('end', done).off('close', done);
      resolve();
    };
    const counted = (chunk: Buffer) => {
      read += chunk.length;
      if (read > DISCARDED_BODY_MAX_BYTES) done();
    };
    const timer = setTimeout(done, DISCARDED_BODY_MAX_MS);
    raw.on('data', counted).once('end', done).once('close', done);
    raw.resume();
  });
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
      silence: () => silenceMethods(reply, FASTIFY_SEND),
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
  /**
   * Fastify refuses a body over its limit (413) without reading it and closes the connection once it has answered:
   * closed with the body unread, the connection is reset, and a Node.js client still sending the body (fetch, http)
   * fails with EPIPE before it reads the 413 (nodejs/node#12339), then retries it as a network error. A request with
   * a key has its body read to its end (and thrown away) first, as Express's body parsers do.
   */
  readRefusedBodies(instance, keyHeaderName) {
    const fastify = instance as FastifyInstanceLike;
    if (readingRefusedBodies.has(fastify)) return;
    readingRefusedBodies.add(fastify);
    const header = keyHeaderName.toLowerCase();
    fastify.addHook('onError', async (request, _reply, error) => {
      if ((error as { code?: unknown }).code !== BODY_TOO_LARGE || request.headers[header] === undefined) return;
      await bodyDiscarded(request.raw);
    });
  },
};
