import type { IdempotencyScope, StoredResponse } from './idempotency-store.interface.js';

/** A completed outcome as this process knows it: the request that produced it, and its response. */
export interface CachedOutcome {
  fingerprint: string;
  response: StoredResponse;
}

export interface ReplayCacheLimits {
  maxEntries: number;
  maxBytes: number;
  maxAgeSeconds: number;
}

/** A moment on two clocks: the monotonic one stops while the host is suspended, the wall clock may be stepped. */
export interface Instant {
  monotonic: number;
  wall: number;
}

interface Entry extends CachedOutcome {
  bytes: number;
  /** Past either reading, the entry is dropped: each clock alone can run slow. */
  expiresAt: Instant;
}

/** What an entry is counted as besides its body: its key, fingerprint and headers, and the entry itself. */
const ENTRY_OVERHEAD_BYTES = 256;

const systemClock = (): Instant => ({ monotonic: performance.now(), wall: Date.now() });

/**
 * Completed outcomes kept in memory, least recently used first out, so that replays skip the database. Sound
 * because a completed record never changes until it expires: an entry lives no longer than its record, nor than
 * `maxAgeSeconds` (which bounds clock drift and what a record edited by hand may still be answered with).
 * Without limits (the cache is off), it keeps nothing.
 */
export class ReplayCache {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(
    private readonly limits: ReplayCacheLimits | undefined,
    private readonly clock: () => Instant = systemClock,
  ) {}

  /** The moment to pass to `remember` as `since`. */
  now(): Instant {
    return this.clock();
  }

  /**
   * The outcome kept for `scope`, if any, and the moment of the lookup (a `since` for `remember`): a miss is followed
   * by a claim, whose record's expiry the database sets after this moment.
   */
  lookup(scope: IdempotencyScope): { cached: CachedOutcome | undefined; since: Instant } {
    const since = this.clock();
    const id = idOf(scope);
    const entry = this.entries.get(id);
    if (!entry) return { cached: undefined, since };
    this.delete(id, entry);
    if (!(since.monotonic < entry.expiresAt.monotonic && since.wall < entry.expiresAt.wall)) {
      return { cached: undefined, since };
    }
    this.entries.set(id, entry); // most recently used last
    this.bytes += entry.bytes;
    return { cached: entry, since };
  }

  /**
   * Keeps an outcome whose record expires `expiresInSeconds` after `since` (a reading of `now()` taken before
   * the database read or wrote the record's expiry, so that the entry cannot outlive it).
   */
  remember(scope: IdempotencyScope, outcome: CachedOutcome, expiresInSeconds: number, since: Instant): void {
    if (!this.limits) return;
    const lifetimeMs = Math.min(expiresInSeconds, this.limits.maxAgeSeconds) * 1000;
    const id = idOf(scope);
    const { fingerprint, response } = outcome;
    const bytes =
      id.length +
      fingerprint.length +
      JSON.stringify(response.headers).length +
      response.body.length +
      ENTRY_OVERHEAD_BYTES;
    if (!(lifetimeMs > 0) || bytes > this.limits.maxBytes) return;
    // A copy of its own: the body may be a view of a larger (pooled) buffer, or of one its handler still holds.
    const body = Buffer.allocUnsafeSlow(response.body.length);
    response.body.copy(body);
    const previous = this.entries.get(id);
    if (previous) this.delete(id, previous);
    const expiresAt = { monotonic: since.monotonic + lifetimeMs, wall: since.wall + lifetimeMs };
    this.entries.set(id, { fingerprint, response: { ...response, body }, bytes, expiresAt });
    this.bytes += bytes;
    for (const [oldest, entry] of this.entries) {
      if (this.entries.size <= this.limits.maxEntries && this.bytes <= this.limits.maxBytes) break;
      this.delete(oldest, entry);
    }
  }

  get size(): number {
    return this.entries.size;
  }

  private delete(id: string, entry: Entry): void {
    this.entries.delete(id);
    this.bytes -= entry.bytes;
  }
}

function idOf({ account, endpoint, key }: IdempotencyScope): string {
  return `${account}\n${endpoint}\n${key}`;
}
