import { Idempotent } from '../../src/index.js';
import { isFinalStatusByDefault, sha256Fingerprint } from '../../src/http/index.js';
import type { IdempotencyModuleOptions, IdempotentOptions } from '../../src/index.js';
import { resolveHttpPolicy } from '../../src/http/requests/http-policy.js';
import {
  checkTenancy,
  resolveCompleterSettings,
  resolvePolicy,
  resolvePurgeSettings,
} from '../../src/protocol/idempotency-policy.js';

/** A route's options as both rooms resolve them: the protocol's and the HTTP edge's, side by side. */
function resolveRoute(moduleOptions: IdempotencyModuleOptions, routeOptions: IdempotentOptions = {}) {
  return { ...resolvePolicy(moduleOptions, routeOptions), ...resolveHttpPolicy(moduleOptions, routeOptions) };
}

describe('resolvePolicy', () => {
  it('documents its defaults', () => {
    const policy = resolveRoute({});
    expect(policy).toMatchObject({
      headerName: 'Idempotency-Key',
      replayHeaderName: 'Idempotent-Replay',
      required: true,
      ttlSeconds: 86_400,
      leaseSeconds: 60,
      retryAfterSeconds: 2,
      storeTimeoutSeconds: 5,
      accountResolver: undefined,
      maxStoredBodyBytes: 1_048_576,
    });
    expect(policy.fingerprint).toBe(sha256Fingerprint);
    expect(policy.isFinalStatus).toBe(isFinalStatusByDefault);
    expect([...policy.storedResponseHeaders]).toEqual(['content-type', 'location']);
  });

  it('lets route options override module options, and ignores the ones a route leaves undefined', () => {
    const policy = resolveRoute(
      { ttlSeconds: 100, leaseSeconds: 5, required: true },
      { ttlSeconds: 7, required: false, leaseSeconds: undefined },
    );
    expect(policy).toMatchObject({ ttlSeconds: 7, leaseSeconds: 5, required: false });
  });

  it('stores listed headers, case-insensitively, but never Set-Cookie, Content-Length or hop-by-hop headers', () => {
    const policy = resolveRoute({
      storedResponseHeaders: [
        'X-Request-Cost',
        'Set-Cookie',
        'Connection',
        'Transfer-Encoding',
        'Content-Length',
        'Keep-Alive',
      ],
    });
    expect([...policy.storedResponseHeaders]).toEqual(['content-type', 'location', 'x-request-cost']);
  });

  it.each(['ttlSeconds', 'leaseSeconds', 'retryAfterSeconds', 'storeTimeoutSeconds', 'maxStoredBodyBytes'] as const)(
    'refuses a non-positive %s',
    (name) => {
      expect(() => resolveRoute({ [name]: 0 })).toThrow(RangeError);
      expect(() => resolveRoute({ [name]: Number.NaN })).toThrow(RangeError);
    },
  );

  // Review of issue #10: `required: config.get('IDEMPOTENCY_REQUIRED')` gives the string "false", which is truthy:
  // the key stays required (the README's two-step rollout breaks) instead of the module refusing the string.
  it.each(['required', 'transactional'] as const)('refuses a %s that is not a boolean, saying what it got', (name) => {
    expect(() => resolveRoute({ [name]: 'false' as unknown as boolean })).toThrow(/got the string "false"/);
  });

  it.each([
    ['headerName', 5, /headerName must be a non-empty string, got the number 5/],
    ['replayHeaderName', '', /replayHeaderName must be a non-empty string, got the string ""/],
    [
      'storedResponseHeaders',
      'x-request-id',
      /storedResponseHeaders must be an array of strings, got the string "x-request-id"/,
    ],
    ['fingerprint', 'sha256', /fingerprint must be a function, got the string "sha256"/],
    ['isFinalStatus', true, /isFinalStatus must be a function, got the boolean true/],
    ['accountResolver', 'user.id', /accountResolver must be a function, got the string "user.id"/],
  ])('refuses a %s of the wrong type, saying what it got', (name, value, message) => {
    expect(() => resolveRoute({ [name]: value })).toThrow(message);
  });

  it('is checked where @Idempotent() is written, so a bad route option fails at start-up', () => {
    expect(() => Idempotent({ leaseSeconds: -1 })).toThrow(/leaseSeconds/);
    expect(() => Idempotent({ leaseSeconds: 1 })).not.toThrow();
  });
});

describe('resolvePurgeSettings', () => {
  it('defaults to batches of 1000 every 300 s', () => {
    expect(resolvePurgeSettings({})).toEqual({ batchSize: 1000, intervalSeconds: 300 });
  });

  it('turns the timer off with false', () => {
    expect(resolvePurgeSettings({ purgeIntervalSeconds: false })).toEqual({ batchSize: 1000, intervalSeconds: false });
  });

  it.each([0, -5, 1.5, Number.NaN])('refuses a batch size of %p', (purgeBatchSize) => {
    expect(() => resolvePurgeSettings({ purgeBatchSize })).toThrow(RangeError);
  });

  it('refuses a non-positive interval, and true', () => {
    expect(() => resolvePurgeSettings({ purgeIntervalSeconds: 0 })).toThrow(RangeError);
    expect(() => resolvePurgeSettings({ purgeIntervalSeconds: true as unknown as number })).toThrow(RangeError);
  });

  it('refuses an interval longer than a Node.js timer keeps (it would fire every millisecond)', () => {
    expect(resolvePurgeSettings({ purgeIntervalSeconds: 2_147_483 }).intervalSeconds).toBe(2_147_483);
    expect(() => resolvePurgeSettings({ purgeIntervalSeconds: 2_147_484 })).toThrow(/at most 2147483 s/);
  });
});

describe('resolveCompleterSettings', () => {
  it('defaults to a look every 30 s, 10 at a time, a backoff from 10 s to an hour, 5 attempts', () => {
    expect(resolveCompleterSettings({})).toEqual({
      intervalSeconds: 30,
      batchSize: 10,
      maxAttempts: 5,
      backoffSeconds: 10,
      maxBackoffSeconds: 3600,
    });
    expect(resolveCompleterSettings({ completer: { intervalSeconds: false } }).intervalSeconds).toBe(false);
  });

  it.each([
    [{ intervalSeconds: 0 }, /completer.intervalSeconds must be a positive number/],
    [{ intervalSeconds: 30 * 24 * 3600 }, /completer.intervalSeconds must be at most 2147483 s/],
    [{ batchSize: 1.5 }, /completer.batchSize must be a positive integer/],
    [{ maxAttempts: 0 }, /completer.maxAttempts must be a positive integer/],
    [{ backoffSeconds: -1 }, /completer.backoffSeconds must be a positive number/],
    [{ maxBackoffSeconds: Number.NaN }, /completer.maxBackoffSeconds must be a positive number/],
    [{ maxBackoffSeconds: 365 * 24 * 3600 + 1 }, /completer.maxBackoffSeconds must be at most 31536000 \(a year\)/],
  ])('refuses %p', (completer, message) => {
    expect(() => resolveCompleterSettings({ completer })).toThrow(message);
  });
});

describe('isFinalStatusByDefault', () => {
  it.each([200, 201, 204, 302, 401, 402, 403, 404, 409, 410, 413, 422])('stores %i', (status) => {
    expect(isFinalStatusByDefault(status)).toBe(true);
  });

  it.each([400, 408, 425, 429, 500, 502, 503])('releases %i', (status) => {
    expect(isFinalStatusByDefault(status)).toBe(false);
  });
});

describe('the module-only options that are not numbers', () => {
  it('refuses a singleTenant that is not a boolean, before reading it as a yes', () => {
    expect(() => checkTenancy({ singleTenant: 'false' as unknown as boolean })).toThrow(
      /singleTenant must be true or false, got the string "false"/,
    );
  });
});

describe("a transport's defaults (consumers: inFlight 'wait', a 15 s lease)", () => {
  const consumerDefaults = { inFlight: 'wait', leaseSeconds: 15 } as const;

  it('apply where neither the module nor the handler sets the option', () => {
    const policy = resolvePolicy({ leaseSeconds: undefined }, {}, consumerDefaults);
    expect(policy.inFlight).toBe('wait');
    expect(policy.leaseSeconds).toBe(15);
  });

  it("give way to the module's options, and those to the handler's", () => {
    expect(resolvePolicy({ leaseSeconds: 30 }, {}, consumerDefaults).leaseSeconds).toBe(30);
    expect(resolvePolicy({ inFlight: 'conflict' }, { inFlight: 'wait' }, consumerDefaults).inFlight).toBe('wait');
    expect(resolvePolicy({ inFlight: 'conflict' }, {}, consumerDefaults).inFlight).toBe('conflict');
  });
});
