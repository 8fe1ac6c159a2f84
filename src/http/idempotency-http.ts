import {
  IdempotencyBodyUnavailableError,
  type IdempotencyError,
  IdempotencyMisconfiguredError,
} from '../protocol/idempotency.errors.js';
import type { FingerprintInput } from './http-options.interface.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import type { HttpRequest, HttpResponse } from './http-platform.js';
import { sendSealed } from './response-capture.js';
import { httpBodyOf, httpStatusOf } from './http-errors.js';

/** The media types Nest's own body parsers read, and so keep raw with `rawBody: true`. */
const RAW_BODY_MEDIA_TYPES: ReadonlySet<string> = new Set(['application/json', 'application/x-www-form-urlencoded']);

/** Where an application keeps the raw body bytes that fingerprints are computed from. */
export const RAW_BODY_SETTING =
  '`NestFactory.create(AppModule, { rawBody: true })` (on Fastify, `NestFactory.create(AppModule, new FastifyAdapter(), ' +
  '{ rawBody: true })`; in tests, `moduleRef.createNestApplication({ rawBody: true })`)';

const RAW_BODY_FIX =
  'Idempotent requests are fingerprinted on their raw body bytes, and this application does not keep them as ' +
  `\`req.rawBody\`: create it with ${RAW_BODY_SETTING}; body parsers of its own (registered with \`app.use()\`, or ` +
  'with `bodyParser: false`) must keep them as well; on Fastify, register them with `app.useBodyParser(type, options, ' +
  'parser)`, which keeps them, rather than with `addContentTypeParser()`.';

/**
 * The raw body bytes as received; the parsed body is never re-serialized. A body that a parser read, or that
 * Nest's parsers would have read, without its raw bytes is the application's set-up, not the client's fault.
 */
export function rawBodyOf(request: HttpRequest): Buffer {
  if (request.rawBody) return request.rawBody;
  const declaresBody =
    Number(request.headers['content-length'] ?? 0) > 0 || request.headers['transfer-encoding'] !== undefined;
  if (!declaresBody) return Buffer.alloc(0);
  const mediaType = contentTypeOf(request).split(';')[0];
  if (request.bodyParsed || RAW_BODY_MEDIA_TYPES.has(mediaType)) throw new IdempotencyMisconfiguredError(RAW_BODY_FIX);
  throw new IdempotencyBodyUnavailableError(mediaType);
}

/** What a request's fingerprint is computed from. */
export function fingerprintInputOf(request: HttpRequest): FingerprintInput {
  return {
    method: request.method,
    url: request.url,
    contentType: contentTypeOf(request),
    body: rawBodyOf(request),
  };
}

/** The request's Content-Type, normalized so that spellings of one type are one: lower-case, no space around `;`. */
function contentTypeOf(request: HttpRequest): string {
  return (request.headers['content-type'] ?? '')
    .trim()
    .toLowerCase()
    .replace(/\s*;\s*/g, ';');
}

/** Method plus route template (`POST /v1/charges/:id/refunds`), so parameters do not split one endpoint in many. */
export function endpointOf(request: HttpRequest, version?: string): string {
  const template = request.routePath ?? request.url.split('?')[0];
  return version === undefined ? `${request.method} ${template}` : `${request.method} ${template} (version ${version})`;
}

/** On the Node.js response, which every platform merges into what it sends (an exception filter's answer, say). */
export function setRetryAfter(response: HttpResponse, seconds: number): void {
  if (!response.raw.headersSent) response.raw.setHeader('Retry-After', String(Math.ceil(seconds)));
}

/**
 * Sends a stored response byte for byte, with the replay header. It is written here, not handed to Nest as a value:
 * interceptors outside the module's (a `{ data }` wrapper, say) would map it again, although the stored bytes are
 * already what they made of it the first time. Nest's own sending of the value that comes back is then ignored.
 */
export function sendReplay(response: HttpResponse, stored: StoredResponse, replayHeaderName: string): void {
  response.syncHeaders();
  sendSealed(response, { ...stored, headers: { ...stored.headers, [replayHeaderName.toLowerCase()]: 'true' } });
}

/** The response Nest's exception filter would send for `error`, for when the module must send it itself. */
export function errorResponse(error: IdempotencyError): StoredResponse {
  const headers: Record<string, string> = { 'content-type': 'application/json; charset=utf-8' };
  if (error.retryAfterSeconds !== undefined) headers['retry-after'] = String(Math.ceil(error.retryAfterSeconds));
  return { status: httpStatusOf(error), headers, body: Buffer.from(JSON.stringify(httpBodyOf(error))) };
}
