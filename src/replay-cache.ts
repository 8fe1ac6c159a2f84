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

interface Entry extends CachedOutcome {
  bytes: number;
  /** On the monotonic clock. */
  expiresAt: number;
}

/** What an entry is counted as besides its body: its key, fingerprint and headers, and the entry itself. */
const ENTRY_OVERHEAD_BYTES = 256;

/**
 * Completed outcomes kept in memory, least recently used first out, so that replays skip the database. Sound
 * because a completed record never changes until it expires: an entry lives no longer than its record, nor than
 * `maxAgeSeconds` (which bounds clock drift and what a record edited by hand may still be answered with).
 */
export class ReplayCache {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(
    private readonly limits: ReplayCacheLimits,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get(scope: IdempotencyScope): CachedOutcome | undefined {
    const id = idOf(scope);
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    this.delete(id, entry);
    if (entry.expiresAt <= this.now()) return undefined;
    this.entries.set(id, entry); // most recently used last
    this.bytes += entry.bytes;
    return entry;
  }

  /**
   * Keeps an outcome whose record expires `expiresInSeconds` after `since` (a reading of this cache's clock
   * taken before the database read or wrote the record's expiry, so that the entry cannot outlive it).
   */
  remember(scope: IdempotencyScope, outcome: CachedOutcome, expiresInSeconds: number, since: number): void {
    const lifetimeMs = Math.min(expiresInSeconds, this.limits.maxAgeSeconds) * 1000;
    const id = idOf(scope);
    const { response } = outcome;
    const bytes = id.length + outcome.fingerprint.length + JSON.stringify(response.headers).length + response.body.length +
      ENTRY_OVERHEAD_BYTES;
    if (lifetimeMs <= 0 || bytes > this.limits.maxBytes) return;
    const previous = this.entries.get(id);
    if (previous) this.delete(id, previous);
    this.entries.set(id, { ...outcome, bytes, expiresAt: since + lifetimeMs });
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
