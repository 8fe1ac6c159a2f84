import type {
  AccountResolver,
  CompleterOptions,
  OutcomeRedaction,
  ProtocolModuleOptions,
  ProtocolIdempotentOptions,
} from './idempotency-options.interface.js';
import type { ReplayCacheLimits } from './replay-cache.js';
import {
  boolean,
  callable,
  oneOf,
  positive,
  positiveAtMost,
  positiveInteger,
  timerSeconds,
  wholeNumber,
} from './option-checks.js';
import { describedValue } from './described-value.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';

/**
 * Refuses module options that do not say who a key belongs to: scoped per endpoint only, one tenant's retry
 * would be answered another tenant's stored response. Both at once is refused too, as one of them is a mistake.
 */
export function checkTenancy({ accountResolver, singleTenant }: ProtocolModuleOptions): void {
  if (singleTenant !== undefined) boolean('singleTenant', singleTenant);
  if (accountResolver && singleTenant) {
    throw new IdempotencySetupError(
      'IdempotencyModule got both `accountResolver` and `singleTenant: true`, which contradict each other: keep ' +
        '`accountResolver` if requests belong to different tenants, or drop it if the API has a single tenant.',
    );
  }
  if (!accountResolver && !singleTenant) {
    throw new IdempotencySetupError(
      'IdempotencyModule needs to know who a key belongs to: pass `accountResolver` (the tenant of a request, by ' +
        'which keys are scoped) or, if the API has a single tenant or its keys are unique across tenants, `singleTenant: true`.',
    );
  }
}

/** The protocol's options resolved for one route (or operation): the module's, overridden by the route's. */
export interface IdempotencyPolicy {
  transactional: boolean;
  inFlight: 'conflict' | 'wait';
  inFlightWaitSeconds: number;
  ttlSeconds: number;
  leaseSeconds: number;
  maxHoldSeconds: number;
  finalizeRetries: number;
  retryAfterSeconds: number;
  storeTimeoutSeconds: number;
  accountResolver: AccountResolver | undefined;
  redact: OutcomeRedaction | undefined;
}

/** The purge settings, checked: a batch is a positive whole number of records, the interval positive or off. */
export function resolvePurgeSettings(options: ProtocolModuleOptions): {
  batchSize: number;
  intervalSeconds: number | false;
} {
  const batchSize = positiveInteger('purgeBatchSize', options.purgeBatchSize ?? 1000);
  const intervalSeconds = options.purgeIntervalSeconds ?? 300;
  return {
    batchSize,
    intervalSeconds: intervalSeconds === false ? false : timerSeconds('purgeIntervalSeconds', intervalSeconds),
  };
}

/** The longest backoff: far past any record's TTL, and within what the database's timestamps can subtract. */
const A_YEAR = 365 * 24 * 3600;

/** The completer's settings, checked. */
export function resolveCompleterSettings({ completer = {} }: ProtocolModuleOptions): Required<CompleterOptions> {
  const intervalSeconds = completer.intervalSeconds ?? 30;
  return {
    intervalSeconds: intervalSeconds === false ? false : timerSeconds('completer.intervalSeconds', intervalSeconds),
    batchSize: positiveInteger('completer.batchSize', completer.batchSize ?? 10),
    maxAttempts: positiveInteger('completer.maxAttempts', completer.maxAttempts ?? 5),
    backoffSeconds: positiveAtMost('completer.backoffSeconds', completer.backoffSeconds ?? 10, A_YEAR, 'a year'),
    maxBackoffSeconds: positiveAtMost(
      'completer.maxBackoffSeconds',
      completer.maxBackoffSeconds ?? 3600,
      A_YEAR,
      'a year',
    ),
  };
}

/** How long shutdown waits for running attempts, checked. */
export function resolveShutdownTimeout(options: ProtocolModuleOptions): number {
  return positive('shutdownTimeoutSeconds', options.shutdownTimeoutSeconds ?? 10);
}

/** The replay cache's limits, checked, or `undefined` when it is off. */
export function resolveReplayCacheLimits({ replayCache = {} }: ProtocolModuleOptions): ReplayCacheLimits | undefined {
  if (replayCache === false) return undefined;
  if (typeof replayCache !== 'object' || replayCache === null) {
    throw new RangeError(
      `Idempotency option replayCache must be false or an object of limits, got ${describedValue(replayCache)}`,
    );
  }
  return {
    maxEntries: positiveInteger('replayCache.maxEntries', replayCache.maxEntries ?? 10_000),
    maxBytes: positiveInteger('replayCache.maxBytes', replayCache.maxBytes ?? 16 * 1024 * 1024),
    maxAgeSeconds: positive('replayCache.maxAgeSeconds', replayCache.maxAgeSeconds ?? 60),
  };
}

/**
 * The policy of a route (or handler, or operation): its options over the module's, over `transportDefaults` (a
 * transport's own defaults where the protocol's do not suit its calls, such as message consumers waiting for an
 * attempt in flight).
 */
export function resolvePolicy(
  moduleOptions: ProtocolModuleOptions,
  routeOptions: ProtocolIdempotentOptions = {},
  transportDefaults: ProtocolIdempotentOptions = {},
): IdempotencyPolicy {
  const options = { ...transportDefaults, ...withoutUndefined(moduleOptions), ...withoutUndefined(routeOptions) };
  return {
    transactional: boolean('transactional', options.transactional ?? false),
    inFlight: oneOf('inFlight', options.inFlight ?? 'conflict', ['conflict', 'wait'] as const),
    inFlightWaitSeconds: positive('inFlightWaitSeconds', options.inFlightWaitSeconds ?? 5),
    ttlSeconds: positive('ttlSeconds', options.ttlSeconds ?? 24 * 60 * 60),
    leaseSeconds: positive('leaseSeconds', options.leaseSeconds ?? 60),
    maxHoldSeconds: positive('maxHoldSeconds', options.maxHoldSeconds ?? 300),
    finalizeRetries: wholeNumber('finalizeRetries', options.finalizeRetries ?? 5),
    retryAfterSeconds: positive('retryAfterSeconds', options.retryAfterSeconds ?? 2),
    storeTimeoutSeconds: positive('storeTimeoutSeconds', options.storeTimeoutSeconds ?? 5),
    accountResolver:
      options.accountResolver === undefined ? undefined : callable('accountResolver', options.accountResolver),
    redact: options.redact === undefined ? undefined : callable('redact', options.redact),
  };
}

function withoutUndefined<T extends object>(options: T): Partial<T> {
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined)) as Partial<T>;
}
