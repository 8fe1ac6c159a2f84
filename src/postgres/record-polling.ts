import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import { quoteTableName } from './postgres-identifiers.js';
import { prepared, type Statement } from './record-statements.js';
import { ScopeWaits, scopeDigest } from './scope-waits.js';

/** The first read of an awaited record comes this long after it was marked; each next one twice as long after. */
const FIRST_POLL_MS = 50;
/** The longest time between two reads: an outcome is seen at most this long after it commits. */
export const MAX_POLL_MS = 500;

/**
 * Whether the record of a scope is in progress with a live lease (counted: 1 or 0). Parameters: account, endpoint,
 * key. Read-only, unlike `markAwaited`'s update: a polled record needs no mark, since nobody is notified.
 */
export function heldRecordStatement(tableName: string): Statement {
  return prepared(`
    SELECT count(*)::int AS count FROM ${quoteTableName(tableName)}
    WHERE account = $1 AND endpoint = $2 AND idempotency_key = $3
      AND status = 'in_progress' AND locked_until > now()`);
}

interface PolledWait {
  /** Starts reading the record (once): its scope was found held by `markAwaited`. */
  poll(): void;
  onEnd(): void;
}

/**
 * Waits for in-flight outcomes without LISTEN (behind a transaction pooler, where a session's LISTEN does not stay
 * on one server connection): once `markAwaited` found the record held, each wait on its scope reads it at growing
 * intervals (50 ms, doubling, at most `MAX_POLL_MS`) until it is no longer held (completed, released, or its lease
 * lapsed), or until the wait's timeout. Like a LISTEN, a wait whose scope was never marked is only ended by its
 * timeout.
 */
export class RecordPolling {
  private readonly waits = new ScopeWaits<PolledWait>();

  constructor(private readonly isHeld: (scope: IdempotencyScope) => Promise<boolean>) {}

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    const held = await this.isHeld(scope);
    if (held) for (const wait of this.waits.on(scopeDigest(scope))) wait.poll();
    return held;
  }

  wait(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    const { changed, cancel } = this.waits.start(scopeDigest(scope), timeoutMs, (control) => {
      let polling = false;
      let nextRead: NodeJS.Timeout | undefined;
      const readAfter = (delayMs: number) => {
        if (control.ended) return;
        nextRead = setTimeout(() => {
          // A read that fails (the database away for a moment) is read again; the timeout still bounds the wait.
          this.isHeld(scope).then(
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
    });
    // Nothing to open: reading the record needs no connection of its own.
    return { changed, listening: Promise.resolve(), cancel };
  }

  /** Ends every wait (at shutdown, once no attempt runs, there are none left). */
  close(): Promise<void> {
    this.waits.endAll();
    return Promise.resolve();
  }
}
