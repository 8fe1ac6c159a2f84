import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import { ScopeWaits, scopeDigest, type WaitControl } from './scope-waits.js';

/** The first read of an awaited record comes this long after it was marked; each next one twice as long after. */
const FIRST_POLL_MS = 50;
/** The longest time between two reads: an outcome is seen at most this long after it commits. */
export const MAX_POLL_MS = 500;

/** Whether the record of a scope is in progress with a live lease: what a polled wait reads. */
export type HeldRecordRead = (scope: IdempotencyScope) => Promise<boolean>;

/** A wait that can read its record until it is free: `poll()` starts reading (once), `onEnd()` stops it. */
export interface PolledWait {
  poll(): void;
  onEnd(): void;
}

/**
 * Reads the record of `scope` at growing intervals (50 ms, doubling, at most `MAX_POLL_MS`) once `poll()` is called,
 * and ends the wait `control` stands for once the record is no longer held (completed, released, or its lease lapsed).
 * A read that fails (the store away for a moment) is read again; the wait's timeout still bounds it.
 */
export function polledWait(isHeld: HeldRecordRead, scope: IdempotencyScope, control: WaitControl): PolledWait {
  let polling = false;
  let nextRead: NodeJS.Timeout | undefined;
  const readAfter = (delayMs: number) => {
    if (control.ended) return;
    nextRead = setTimeout(() => {
      isHeld(scope).then(
        (held) => (held ? readAfter(Math.min(delayMs * 2, MAX_POLL_MS)) : control.end()),
        () => readAfter(Math.min(delayMs * 2, MAX_POLL_MS)),
      );
    }, delayMs);
  };
  return {
    poll: () => {
      if (polling) return;
      polling = true;
      readAfter(FIRST_POLL_MS);
    },
    onEnd: () => clearTimeout(nextRead),
  };
}

/**
 * Waits for in-flight outcomes without being told of them (behind a transaction pooler, where a session's LISTEN does
 * not stay on one server connection): once `markAwaited` found the record held, each wait on its scope reads it
 * (`polledWait`) until it is no longer held, or until the wait's timeout. Like a LISTEN, a wait whose scope was never
 * marked is only ended by its timeout.
 */
export class RecordPolling {
  private readonly waits = new ScopeWaits<PolledWait>();

  constructor(private readonly isHeld: HeldRecordRead) {}

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    const held = await this.isHeld(scope);
    if (held) for (const wait of this.waits.on(scopeDigest(scope))) wait.poll();
    return held;
  }

  wait(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    const { changed, cancel } = this.waits.start(scopeDigest(scope), timeoutMs, (control) =>
      polledWait(this.isHeld, scope, control),
    );
    // Nothing to open: reading the record needs no connection of its own.
    return { changed, listening: Promise.resolve(), cancel };
  }

  /** Ends every wait (at shutdown, once no attempt runs, there are none left). */
  close(): Promise<void> {
    this.waits.endAll();
    return Promise.resolve();
  }
}
