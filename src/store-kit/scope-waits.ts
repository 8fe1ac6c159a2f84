import { createHash } from 'node:crypto';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';

/** What a wait is told of itself: whether it has ended, and how to end it (woken, or cancelled). */
export interface WaitControl {
  readonly ended: boolean;
  readonly end: () => void;
}

/** A wait of `ScopeWaits`: `onEnd`, if any, runs once when it ends. */
export interface ScopeWait {
  onEnd?(): void;
}

/**
 * The in-flight waits of a store by scope (its digest), for the LISTEN connection and for polling alike: each ends
 * once, by its timeout or by `end()`, and then leaves the registry and resolves its `changed`.
 */
export class ScopeWaits<Wait extends ScopeWait> {
  private readonly byDigest = new Map<string, Set<Wait>>();
  private readonly ends = new Map<Wait, () => void>();

  /** Registers the wait `build` makes on `digest`, ended after `timeoutMs` at the latest. */
  start(
    digest: string,
    timeoutMs: number,
    build: (control: WaitControl) => Wait,
  ): { changed: Promise<void>; cancel: () => void } {
    let wake!: () => void;
    const changed = new Promise<void>((resolve) => (wake = resolve));
    let ended = false;
    const control: WaitControl = {
      get ended() {
        return ended;
      },
      end: () => {
        if (ended) return;
        ended = true;
        clearTimeout(timer);
        const waits = this.byDigest.get(digest);
        waits?.delete(wait);
        if (waits?.size === 0) this.byDigest.delete(digest);
        this.ends.delete(wait);
        wait.onEnd?.();
        wake();
      },
    };
    const timer = setTimeout(() => control.end(), timeoutMs);
    const wait = build(control);
    if (!this.byDigest.has(digest)) this.byDigest.set(digest, new Set());
    this.byDigest.get(digest)?.add(wait);
    this.ends.set(wait, control.end);
    return { changed, cancel: () => control.end() };
  }

  /** Ends every wait. */
  endAll(): void {
    for (const end of [...this.ends.values()]) end();
  }

  /** The waits on `digest` now (a copy: ending one while iterating is safe). */
  on(digest: string): Wait[] {
    return [...(this.byDigest.get(digest) ?? [])];
  }
}

/** The payload of a change notification: short, and the same on every instance. */
export function scopeDigest(scope: IdempotencyScope): string {
  return createHash('md5').update(`${scope.account}\n${scope.endpoint}\n${scope.key}`).digest('hex');
}
