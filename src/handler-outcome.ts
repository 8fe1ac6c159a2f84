import { HttpException, StreamableFile } from '@nestjs/common';
import { HEADERS_METADATA, HTTP_CODE_METADATA } from '@nestjs/common/constants.js';
import { isObservable } from 'rxjs';
import type { HandlerSettlement } from './handler-work.js';
import type { AttemptOutcome } from './idempotency.service.js';
import { pickHeaders } from './response-capture.js';

/** What Nest reads from a route to send its handler's value: the method's `@HttpCode` and `@Header`s. */
export interface RouteResponseMetadata {
  handler: object;
  method: string;
  storedHeaders: ReadonlySet<string>;
  maxBodyBytes: number;
}

/**
 * The outcome of a handler whose answer went out before it was done (a timeout interceptor answered for it):
 * the response Nest would have sent for its value or its `HttpException`, as Nest's Express platform writes
 * them (JSON for objects, text for other values, the route's status and headers). A value that cannot be sent
 * that way (a stream, a file), an unexpected error or a cancelled Observable has no storable response.
 */
export function outcomeOfSettlement(settlement: HandlerSettlement, route: RouteResponseMetadata): AttemptOutcome {
  if (settlement.status === 'cancelled') return { response: undefined, failed: true };
  if (settlement.status === 'rejected') {
    const { reason } = settlement;
    if (!(reason instanceof HttpException)) return { response: undefined, failed: true };
    const body = reason.getResponse();
    const json = typeof body === 'object' ? body : { statusCode: reason.getStatus(), message: body };
    return { response: jsonResponse(reason.getStatus(), {}, json, route), failed: true };
  }
  const { value } = settlement;
  if (!isSerializableBody(value)) return { response: undefined, failed: false };
  const status: number = Reflect.getMetadata(HTTP_CODE_METADATA, route.handler) ?? (route.method === 'POST' ? 201 : 200);
  const headers: Record<string, string> = {};
  for (const { name, value: header } of (Reflect.getMetadata(HEADERS_METADATA, route.handler) ?? []) as RouteHeader[]) {
    headers[name.toLowerCase()] = String(typeof header === 'function' ? header() : header);
  }
  if (value === undefined || value === null) return { response: stored(status, headers, Buffer.alloc(0), route), failed: false };
  if (typeof value === 'object') return { response: jsonResponse(status, headers, value, route), failed: false };
  const text = Buffer.from(String(value));
  return { response: stored(status, { 'content-type': 'text/html; charset=utf-8', ...headers }, text, route), failed: false };
}

interface RouteHeader {
  name: string;
  value: string | (() => string);
}

function jsonResponse(status: number, headers: Record<string, string>, body: object, route: RouteResponseMetadata) {
  const json = Buffer.from(JSON.stringify(body));
  return stored(status, { 'content-type': 'application/json; charset=utf-8', ...headers }, json, route);
}

function stored(status: number, headers: Record<string, string>, body: Buffer, route: RouteResponseMetadata) {
  if (body.length > route.maxBodyBytes) return undefined;
  return { status, headers: pickHeaders(headers, route.storedHeaders), body };
}

/** Values Nest sends as JSON or text, which can therefore be stored without sending them. */
export function isSerializableBody(value: unknown): boolean {
  if (typeof value === 'function' || typeof value === 'symbol') return false;
  if (value === null || typeof value !== 'object') return true;
  if (value instanceof StreamableFile || isObservable(value) || value instanceof Response || value instanceof ReadableStream) {
    return false;
  }
  return typeof (value as { pipe?: unknown }).pipe !== 'function' && !(Symbol.asyncIterator in value);
}
