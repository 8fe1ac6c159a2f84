import { createHash } from 'node:crypto';
import { boolean, callable, nonEmptyString, oneOf, positive, stringList } from '../../protocol/option-checks.js';
import type {
  FingerprintInput,
  HttpIdempotencyModuleOptions,
  HttpIdempotentOptions,
} from '../http-options.interface.js';
import { defaultProfile } from '../answers/http-answers.js';
import { HTTP_PROFILES, type HttpProfile, type HttpProfileName } from '../answers/http-profile.js';
import { DEFAULT_PROBLEM_TYPE_BASE, ietfProfile } from '../answers/ietf-profile.js';
import { stripeProfile } from '../answers/stripe-profile.js';
import { finalStatusRule } from '../../transport-kit/final-statuses.js';

/** Headers that describe one connection or one message, or that must never be replayed to another client. */
const NEVER_STORED_HEADERS: ReadonlySet<string> = new Set([
  'set-cookie',
  'content-length',
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

const ALWAYS_STORED_HEADERS = ['content-type', 'location'];

/** Default fingerprint: sha256 of the method, the path with its query, the content type and the raw body bytes. */
export function sha256Fingerprint({ method, url, contentType, body }: FingerprintInput): string {
  // No method, request target or header value can hold a newline, so these two lines are unambiguous.
  return createHash('sha256').update(`${method} ${url}\n${contentType}\n`).update(body).digest('hex');
}

/** The HTTP edge's options resolved for one route: the module's, overridden by the route's. */
export interface HttpRoutePolicy {
  headerName: string;
  replayHeaderName: string;
  required: boolean;
  fingerprint: (input: FingerprintInput) => string;
  /** Lower-case names of the response headers that are stored and replayed. */
  storedResponseHeaders: ReadonlySet<string>;
  maxStoredBodyBytes: number;
  /** How the module's own answers are worded (the module's, for every route). */
  profile: HttpProfile;
  /** Whether a response of this status is the route's final outcome, stored and replayed. */
  isFinalStatus: (status: number) => boolean;
}

/** Checked with every room's wording, so that a wrong value refuses the start (or the decorator) with its name. */
export function resolveHttpPolicy(
  moduleOptions: HttpIdempotencyModuleOptions,
  routeOptions: HttpIdempotentOptions = {},
): HttpRoutePolicy {
  const defined = Object.entries(routeOptions).filter(([, value]) => value !== undefined);
  const options: HttpIdempotencyModuleOptions = { ...moduleOptions, ...Object.fromEntries(defined) };
  const extraHeaders = stringList('storedResponseHeaders', options.storedResponseHeaders ?? []).map((name) =>
    name.toLowerCase(),
  );
  const profile = profileOf(options);
  return {
    headerName: nonEmptyString('headerName', options.headerName ?? 'Idempotency-Key'),
    replayHeaderName: nonEmptyString('replayHeaderName', options.replayHeaderName ?? profile.replayHeaderName),
    required: boolean('required', options.required ?? true),
    fingerprint: callable('fingerprint', options.fingerprint ?? sha256Fingerprint),
    storedResponseHeaders: new Set(
      [...ALWAYS_STORED_HEADERS, ...extraHeaders].filter((name) => !NEVER_STORED_HEADERS.has(name)),
    ),
    maxStoredBodyBytes: positive('maxStoredBodyBytes', options.maxStoredBodyBytes ?? 1024 * 1024),
    profile,
    isFinalStatus: finalStatusRule(options),
  };
}

function profileOf(options: HttpIdempotencyModuleOptions): HttpProfile {
  const name: HttpProfileName = oneOf('profile', options.profile ?? 'default', HTTP_PROFILES);
  const problemTypeBase = nonEmptyString('problemTypeBase', options.problemTypeBase ?? DEFAULT_PROBLEM_TYPE_BASE);
  if (name === 'stripe') return stripeProfile;
  return name === 'ietf' ? ietfProfile(problemTypeBase) : defaultProfile;
}
