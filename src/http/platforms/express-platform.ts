import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpPlatform } from './http-platform.js';
import { type NoOpMethods, silenceMethods } from './silenced-methods.js';

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

/** Express's ways of sending a body, through which Nest sends a value. */
const EXPRESS_SENDS: NoOpMethods = {
  send(this: object) {
    return this;
  },
  json(this: object) {
    return this;
  },
};

/** Nest's Express platform: the response is the Node.js response itself, extended by Express. */
export const expressPlatform: HttpPlatform = {
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
    const res = response as ServerResponse;
    return {
      platformResponse: res,
      raw: res,
      syncHeaders: () => undefined,
      // Express's `send` and `json` (through which Nest sends a value) are skipped whole, so that nothing is
      // serialized or hashed for an answer that is not sent.
      silence: () => silenceMethods(res, EXPRESS_SENDS),
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
  // Express's body parsers read a body over their limit to its end before the 413 is sent.
  readRefusedBodies: () => undefined,
};
