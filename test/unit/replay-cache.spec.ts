import { resolveReplayCacheLimits } from '../../src/protocol/idempotency-policy.js';
import { ReplayCache, type ReplayCacheLimits } from '../../src/protocol/replay-cache.js';

const scope = (key: string) => ({ account: 'acct', endpoint: 'POST /v1/charges', key });
const outcome = (body = '{"id":"ch_1"}') => ({
  fingerprint: 'fp',
  response: { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from(body) },
});

function cacheWith(limits: Partial<ReplayCacheLimits> = {}) {
  const clock = { monotonic: 1_000, wall: 1_000_000 };
  const cache = new ReplayCache({ maxEntries: 100, maxBytes: 1 << 20, maxAgeSeconds: 60, ...limits }, () => ({
    ...clock,
  }));
  /** Moves both clocks on. */
  const advance = (ms: number) => {
    clock.monotonic += ms;
    clock.wall += ms;
  };
  return { cache, clock, advance };
}

describe('ReplayCache', () => {
  it('answers a remembered outcome for its scope only', () => {
    const { cache } = cacheWith();
    cache.remember(scope('a'), outcome(), 3600, cache.now());
    expect(cache.lookup(scope('a')).cached).toMatchObject(outcome());
    expect(cache.lookup(scope('b')).cached).toBeUndefined();
    expect(cache.lookup({ ...scope('a'), account: 'other' }).cached).toBeUndefined();
    expect(cache.lookup({ ...scope('a'), endpoint: 'POST /v1/refunds' }).cached).toBeUndefined();
  });

  it('gives the moment of its lookup, hit or miss, for the record a miss goes on to claim', () => {
    const { cache, advance } = cacheWith();
    advance(250);
    expect(cache.lookup(scope('a')).since).toEqual({ monotonic: 1_250, wall: 1_000_250 });
    cache.remember(scope('a'), outcome(), 3600, cache.now());
    advance(10);
    expect(cache.lookup(scope('a'))).toMatchObject({ since: { monotonic: 1_260, wall: 1_000_260 } });
  });

  it('keeps nothing when it is off', () => {
    const cache = new ReplayCache(undefined);
    cache.remember(scope('a'), outcome(), 3600, cache.now());
    expect(cache.lookup(scope('a')).cached).toBeUndefined();
  });

  it('forgets an outcome when its record expires, counted from before the record was read or written', () => {
    const { cache, advance } = cacheWith();
    const since = cache.now();
    advance(500); // the database answered 500 ms later that the record had 2 s left
    cache.remember(scope('a'), outcome(), 2, since);
    advance(1_499);
    expect(cache.lookup(scope('a')).cached).toBeDefined();
    advance(1);
    expect(cache.lookup(scope('a')).cached).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('forgets an outcome when either clock says it expired: the monotonic one stops while the host sleeps', () => {
    const { cache, clock } = cacheWith();
    cache.remember(scope('asleep'), outcome(), 10, cache.now());
    cache.remember(scope('stepped'), outcome(), 10, cache.now());
    clock.wall += 10_000; // suspended for 10 s: the monotonic clock did not move
    expect(cache.lookup(scope('asleep')).cached).toBeUndefined();
    clock.wall -= 20_000; // the wall clock stepped back; the monotonic one still counts
    clock.monotonic += 10_000;
    expect(cache.lookup(scope('stepped')).cached).toBeUndefined();
  });

  it('forgets an outcome after maxAgeSeconds however long its record lives', () => {
    const { cache, advance } = cacheWith({ maxAgeSeconds: 10 });
    cache.remember(scope('a'), outcome(), 86_400, cache.now());
    advance(9_999);
    expect(cache.lookup(scope('a')).cached).toBeDefined();
    advance(1);
    expect(cache.lookup(scope('a')).cached).toBeUndefined();
  });

  it('does not keep an outcome whose record has expired, or whose lifetime is unknown', () => {
    const { cache } = cacheWith();
    cache.remember(scope('expired'), outcome(), -0.5, cache.now());
    cache.remember(scope('unknown'), outcome(), Number.NaN, cache.now());
    cache.remember(scope('missing'), outcome(), undefined as unknown as number, cache.now());
    expect(cache.size).toBe(0);
  });

  it("keeps a copy of the body: a later change to the handler's buffer does not reach replays", () => {
    const { cache } = cacheWith();
    const pooled = Buffer.from('....{"id":"ch_1"}....');
    const response = { status: 201, headers: {}, body: pooled.subarray(4, 17) };
    cache.remember(scope('a'), { fingerprint: 'fp', response }, 60, cache.now());
    pooled.fill(0x20);
    const body = cache.lookup(scope('a')).cached?.response.body as Buffer;
    expect(body.toString()).toBe('{"id":"ch_1"}');
    expect(body.buffer.byteLength).toBe(body.length);
  });

  it('holds at most maxEntries, evicting the least recently used', () => {
    const { cache } = cacheWith({ maxEntries: 2 });
    cache.remember(scope('a'), outcome(), 60, cache.now());
    cache.remember(scope('b'), outcome(), 60, cache.now());
    expect(cache.lookup(scope('a')).cached).toBeDefined(); // a is now the most recently used
    cache.remember(scope('c'), outcome(), 60, cache.now());
    expect(cache.size).toBe(2);
    expect(cache.lookup(scope('b')).cached).toBeUndefined();
    expect(cache.lookup(scope('a')).cached).toBeDefined();
    expect(cache.lookup(scope('c')).cached).toBeDefined();
  });

  it('holds at most maxBytes, and never an outcome larger than that', () => {
    const { cache } = cacheWith({ maxBytes: 2_000 });
    cache.remember(scope('huge'), outcome('x'.repeat(2_000)), 60, cache.now());
    expect(cache.lookup(scope('huge')).cached).toBeUndefined();
    for (const key of ['a', 'b', 'c', 'd', 'e']) cache.remember(scope(key), outcome('x'.repeat(500)), 60, cache.now());
    expect(cache.size).toBeLessThan(5);
    expect(cache.lookup(scope('e')).cached).toBeDefined();
    expect(cache.lookup(scope('a')).cached).toBeUndefined();
  });

  it('replaces an entry remembered twice without counting its bytes twice', () => {
    // Room for exactly two entries of this size: counting the replaced one would evict a.
    const size =
      'acct\nPOST /v1/charges\na'.length +
      'fp'.length +
      JSON.stringify({ 'content-type': 'application/json' }).length +
      400 +
      256;
    const { cache } = cacheWith({ maxBytes: 2 * size });
    cache.remember(scope('a'), outcome('x'.repeat(400)), 60, cache.now());
    cache.remember(scope('b'), outcome('y'.repeat(400)), 60, cache.now());
    cache.remember(scope('b'), outcome('z'.repeat(400)), 60, cache.now());
    expect(cache.size).toBe(2);
    expect(cache.lookup(scope('a')).cached).toBeDefined();
    expect(cache.lookup(scope('b')).cached?.response.body.toString()).toBe('z'.repeat(400));
  });
});

describe('resolveReplayCacheLimits', () => {
  it('documents its defaults, and turns off with false', () => {
    expect(resolveReplayCacheLimits({})).toEqual({ maxEntries: 10_000, maxBytes: 16 * 1024 * 1024, maxAgeSeconds: 60 });
    expect(resolveReplayCacheLimits({ replayCache: { maxEntries: 5 } })).toMatchObject({
      maxEntries: 5,
      maxAgeSeconds: 60,
    });
    expect(resolveReplayCacheLimits({ replayCache: false })).toBeUndefined();
  });

  it('refuses a replayCache that is neither false nor an object', () => {
    expect(() => resolveReplayCacheLimits({ replayCache: null as unknown as false })).toThrow(
      /replayCache must be false or an object/,
    );
  });

  it('refuses limits that are not positive', () => {
    expect(() => resolveReplayCacheLimits({ replayCache: { maxEntries: 0 } })).toThrow(
      /replayCache.maxEntries must be a positive integer/,
    );
    expect(() => resolveReplayCacheLimits({ replayCache: { maxBytes: 1.5 } })).toThrow(/replayCache.maxBytes/);
    expect(() => resolveReplayCacheLimits({ replayCache: { maxAgeSeconds: -1 } })).toThrow(/replayCache.maxAgeSeconds/);
  });
});
