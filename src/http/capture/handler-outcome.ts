import { StreamableFile } from '@nestjs/common';
import { HEADERS_METADATA, HTTP_CODE_METADATA } from '@nestjs/common/constants.js';
import { isObservable } from 'rxjs';
import type { StoredResponse } from '../../protocol/idempotency-store.interface.js';
import type { HttpPlatform } from '../platforms/http-platform.js';
import { pickHeaders } from './response-capture.js';

/** What Nest reads from a route to send its handler's value: the method's `@HttpCode` and `@Header`s. */
export interface RouteResponseMetadata {
  handler: object;
  method: string;
  storedHeaders: ReadonlySet<string>;
  maxBodyBytes: number;
  /** The platform, which decides how a value is sent. */
  platform: HttpPlatform;
}

/**
 * The response Nest's platform sends for a route's value (JSON for objects, text for strings: see
 * `HttpPlatform.bodyForValue`; the route's status and headers), for a handler whose answer went out before it was done (a timeout interceptor
 * answered for it). `undefined` when the value cannot be sent that way (a stream, a file) or is too large to store.
 */
export function responseForValue(value: unknown, route: RouteResponseMetadata): StoredResponse | undefined {
  if (!isSerializableBody(value)) return undefined;
  const status =
    (Reflect.getMetadata(HTTP_CODE_METADATA, route.handler) as number | undefined) ??
    (route.method === 'POST' ? 201 : 200);
  const headers: Record<string, string> = {};
  for (const { name, value: header } of (Reflect.getMetadata(HEADERS_METADATA, route.handler) ?? []) as RouteHeader[]) {
    headers[name.toLowerCase()] = String(typeof header === 'function' ? header() : header);
  }
  const { body, contentType } = route.platform.bodyForValue(value);
  if (contentType !== undefined) headers['content-type'] ??= contentType;
  if (body.length > route.maxBodyBytes) return undefined;
  return { status, headers: pickHeaders(headers, route.storedHeaders), body };
}

interface RouteHeader {
  name: string;
  value: string | (() => string);
}

/** Values Nest sends as JSON or text, which can therefore be stored without sending them. */
export function isSerializableBody(value: unknown): boolean {
  if (typeof value === 'function' || typeof value === 'symbol') return false;
  if (value === null || typeof value !== 'object') return true;
  if (
    value instanceof StreamableFile ||
    isObservable(value) ||
    value instanceof Response ||
    value instanceof ReadableStream
  ) {
    return false;
  }
  return typeof (value as { pipe?: unknown }).pipe !== 'function' && !(Symbol.asyncIterator in value);
}
