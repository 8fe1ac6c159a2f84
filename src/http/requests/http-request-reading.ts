import { type ExecutionContext, HttpException } from '@nestjs/common';
import {
  IdempotencyAccountUnresolvedError,
  IdempotencyBodyUnavailableError,
  IdempotencyKeyRequiredError,
  IdempotencyMisconfiguredError,
} from '../../protocol/idempotency.errors.js';
import type { IdempotentCall } from '../../protocol/idempotency-transport.interface.js';
import { parseIdempotencyKey } from '../../transport-kit/key-header.js';
import { PASS_THROUGH_METHODS } from '../http.constants.js';
import type { RoutePlan } from './route-plans.js';
import type { IdempotencyPolicy } from '../../protocol/idempotency-policy.js';
import { resolveAccount } from '../../transport-kit/account-resolution.js';
import type { FingerprintInput } from '../http-options.interface.js';
import type { HttpRequest } from '../platforms/http-platform.js';
import type { OnceLog } from '../../protocol/once-log.js';

// Reading an idempotent HTTP request, in one pass: its key (transport-kit/key-header.ts, which GraphQL reads too), its
// account, its endpoint and its fingerprint.

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
function rawBodyOf(request: HttpRequest): Buffer {
  if (request.rawBody) return request.rawBody;
  const declaresBody =
    Number(request.headers['content-length'] ?? 0) > 0 || request.headers['transfer-encoding'] !== undefined;
  if (!declaresBody) return Buffer.alloc(0);
  const mediaType = contentTypeOf(request).split(';')[0];
  if (request.bodyParsed || RAW_BODY_MEDIA_TYPES.has(mediaType)) throw new IdempotencyMisconfiguredError(RAW_BODY_FIX);
  throw new IdempotencyBodyUnavailableError(mediaType);
}

/**
 * What a request to an idempotent route is claimed by: its key, scope and fingerprint, and how refusals name them; or
 * `undefined` to let it through (a safe method, or no key where the route does not require one).
 */
export async function readClaimTerms(
  context: ExecutionContext,
  { policy, http, version }: RoutePlan,
  request: HttpRequest,
  log: OnceLog,
): Promise<IdempotentCall | undefined> {
  if (PASS_THROUGH_METHODS.has(request.method)) return undefined;
  const key = parseIdempotencyKey(request.headers[http.headerName.toLowerCase()], http.headerName);
  if (key === undefined) {
    if (http.required) throw new IdempotencyKeyRequiredError(`${http.headerName} header`);
    return undefined;
  }
  return {
    policy,
    scope: { account: await accountOf(context, request, policy, log), endpoint: endpointOf(request, version), key },
    fingerprint: http.fingerprint(fingerprintInputOf(request, log)),
    terms: { key: http.headerName, usedWith: 'request (method, path, query or body)' },
  };
}

/** What a request's fingerprint is computed from; a set-up problem it reveals is logged once, with its fix. */
function fingerprintInputOf(request: HttpRequest, log: OnceLog): FingerprintInput {
  try {
    return { method: request.method, url: request.url, contentType: contentTypeOf(request), body: rawBodyOf(request) };
  } catch (error) {
    if (error instanceof IdempotencyMisconfiguredError) log.error(error.setupFix, error.setupFix);
    throw error;
  }
}

/** The request's Content-Type, normalized so that spellings of one type are one: lower-case, no space around `;`. */
function contentTypeOf(request: HttpRequest): string {
  return (request.headers['content-type'] ?? '')
    .trim()
    .toLowerCase()
    .replace(/\s*;\s*/g, ';');
}

/** Method plus route template (`POST /v1/charges/:id/refunds`), so parameters do not split one endpoint in many. */
function endpointOf(request: HttpRequest, version?: string): string {
  const template = request.routePath ?? request.url.split('?')[0];
  return version === undefined ? `${request.method} ${template}` : `${request.method} ${template} (version ${version})`;
}

/**
 * The account a request belongs to. A resolver that fails, or gives no account, is the application's mistake (a
 * public route under a resolver that reads what a guard sets): answered 500 before anything is claimed, and
 * logged once per route with the reason. An `HttpException` it throws (a 401, say) is its answer, and passes.
 */
function accountOf(
  context: ExecutionContext,
  request: HttpRequest,
  policy: IdempotencyPolicy,
  log: OnceLog,
): Promise<string> {
  return resolveAccount(context, policy, {
    isAnswer: (error) => error instanceof HttpException,
    unresolved: (reason) => accountUnresolved(context, request, log, reason),
  });
}

function accountUnresolved(
  context: ExecutionContext,
  request: HttpRequest,
  log: OnceLog,
  reason: string,
): IdempotencyAccountUnresolvedError {
  const endpoint = endpointOf(request);
  log.error(
    `account ${endpoint}`,
    `The accountResolver gave no account for ${context.getClass().name}.${context.getHandler().name} (${endpoint}): ` +
      `${reason}. Its requests are answered 500 idempotency_account_unresolved and do not run. The resolver runs ` +
      'after guards: a route without the guard it relies on (a public route) needs a resolver of its own, ' +
      '`@Idempotent({ accountResolver })`.',
  );
  return new IdempotencyAccountUnresolvedError();
}
