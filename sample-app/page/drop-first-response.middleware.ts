import { Injectable, type NestMiddleware } from '@nestjs/common';
import type { IncomingMessage, ServerResponse } from 'node:http';

const REMEMBERED_KEYS = 10_000;

/**
 * The page's "drop the first response" toggle: a request sent with `X-Demo-Drop-Response: once` is processed
 * as usual, but the first answer for its idempotency key is cut off on the way out, as a lost response would be.
 * Its retry, with the same key, gets the answer (a replay).
 */
@Injectable()
export class DropFirstResponseMiddleware implements NestMiddleware {
  private readonly dropped = new Set<string>();

  // Nest middleware gets Node's request and response on either platform (on Fastify, through @fastify/middie).
  use(request: IncomingMessage, response: ServerResponse, next: () => void): void {
    const key = request.headers['idempotency-key'];
    if (
      request.headers['x-demo-drop-response'] === 'once' &&
      typeof key === 'string' &&
      key &&
      !this.dropped.has(key)
    ) {
      if (this.dropped.size >= REMEMBERED_KEYS) this.dropped.clear();
      this.dropped.add(key);
      response.end = (() => {
        response.socket?.destroy();
        return response;
      }) as ServerResponse['end'];
    }
    next();
  }
}
