import { resolveReplayCacheLimits } from '../../src/idempotency-policy.js';
import { ReplayCache, type ReplayCacheLimits } from '../../src/replay-cache.js';

const scope = (key: string) => ({ account: 'acct', endpoint: 'POST /v1/charges', key });
const outcome = (body = '{"id":"ch_1"}') => ({
  fingerprint: 'fp',
  response: { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from(body) },
});

function cacheWith(limits: Partial<ReplayCacheLimits> = {}) {
  const clock = { now: 1_000 };
  const cache = new ReplayCache({ maxEntries: 100, maxBytes: 1 << 20, maxAgeSeconds: 60, ...limits }, () => clock.now);
  return { cache, clock };
}

describe('ReplayCache', () => {
  it('answers a remembered outcome for its scope only', () => {
    const { cache } = cacheWith();
    cache.remember(scope('a'), outcome(), 3600, 1_000);
    expect(cache.get(scope('a'))).toMatchObject(outcome());
    expect(cache.get(scope('b'))).toBeUndefined();
    expect(cache.get({ ...scope('a'), account: 'other' })).toBeUndefined();
    expect(cache.get({ ...scope('a'), endpoint: 'POST /v1/refunds' })).toBeUndefined();
  });

  it('forgets an outcome when its record expires, counted from before the record was read or written', () => {
    const { cache, clock } = cacheWith();
    cache.remember(scope('a'), outcome(), 2, 500); // read at 500 with 2 s left: the record expires at 2500 at the latest
    clock.now = 2_499;
    expect(cache.get(scope('a'))).toBeDefined();
    clock.now = 2_500;
    expect(cache.get(scope('a'))).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('forgets an outcome after maxAgeSeconds however long its record lives', () => {
    const { cache, clock } = cacheWith({ maxAgeSeconds: 10 });
    cache.remember(scope('a'), outcome(), 86_400, 1_000);
    clock.now = 10_999;
    expect(cache.get(scope('a'))).toBeDefined();
    clock.now = 11_000;
    expect(cache.get(scope('a'))).toBeUndefined();
  });

  it('does not keep an outcome whose record has already expired', () => {
    const { cache } = cacheWith();
    cache.remember(scope('a'), outcome(), -0.5, 1_000);
    expect(cache.get(scope('a'))).toBeUndefined();
  });

  it('holds at most maxEntries, evicting the least recently used', () => {
    const { cache } = cacheWith({ maxEntries: 2 });
    cache.remember(scope('a'), outcome(), 60, 1_000);
    cache.remember(scope('b'), outcome(), 60, 1_000);
    expect(cache.get(scope('a'))).toBeDefined(); // a is now the most recently used
    cache.remember(scope('c'), outcome(), 60, 1_000);
    expect(cache.size).toBe(2);
    expect(cache.get(scope('b'))).toBeUndefined();
    expect(cache.get(scope('a'))).toBeDefined();
    expect(cache.get(scope('c'))).toBeDefined();
  });

  it('holds at most maxBytes, and never an outcome larger than that', () => {
    const { cache } = cacheWith({ maxBytes: 2_000 });
    cache.remember(scope('huge'), outcome('x'.repeat(2_000)), 60, 1_000);
    expect(cache.get(scope('huge'))).toBeUndefined();
    for (const key of ['a', 'b', 'c', 'd', 'e']) cache.remember(scope(key), outcome('x'.repeat(500)), 60, 1_000);
    expect(cache.size).toBeLessThan(5);
    expect(cache.get(scope('e'))).toBeDefined();
    expect(cache.get(scope('a'))).toBeUndefined();
  });

  it('replaces an entry remembered twice without counting it twice', () => {
    const { cache } = cacheWith({ maxEntries: 2 });
    cache.remember(scope('a'), outcome(), 60, 1_000);
    cache.remember(scope('a'), outcome('{"id":"ch_2"}'), 60, 1_000);
    cache.remember(scope('b'), outcome(), 60, 1_000);
    expect(cache.size).toBe(2);
    expect(cache.get(scope('a'))?.response.body.toString()).toBe('{"id":"ch_2"}');
  });
});

describe('resolveReplayCacheLimits', () => {
  it('documents its defaults, and turns off with false', () => {
    expect(resolveReplayCacheLimits({})).toEqual({ maxEntries: 10_000, maxBytes: 16 * 1024 * 1024, maxAgeSeconds: 60 });
    expect(resolveReplayCacheLimits({ replayCache: { maxEntries: 5 } })).toMatchObject({ maxEntries: 5, maxAgeSeconds: 60 });
    expect(resolveReplayCacheLimits({ replayCache: false })).toBeUndefined();
  });

  it('refuses limits that are not positive', () => {
    expect(() => resolveReplayCacheLimits({ replayCache: { maxEntries: 0 } })).toThrow(/replayCache.maxEntries must be a positive integer/);
    expect(() => resolveReplayCacheLimits({ replayCache: { maxBytes: 1.5 } })).toThrow(/replayCache.maxBytes/);
    expect(() => resolveReplayCacheLimits({ replayCache: { maxAgeSeconds: -1 } })).toThrow(/replayCache.maxAgeSeconds/);
  });
});
