import { type Channel, channel } from 'node:diagnostics_channel';
import type { IdempotencyScope } from './idempotency-store.interface.js';

/**
 * The `node:diagnostics_channel` channels the module publishes on, for an application's logs and alerts. Subscribing
 * costs the module nothing when nobody listens (`hasSubscribers` is checked before a payload is built).
 */
export const IDEMPOTENCY_CHANNELS = {
  /** A running attempt's claim was found no longer held (its lease renewal or its outcome found another holder). */
  lockLost: 'nest-idempotency:lock-lost',
  /** A claim took over an in-progress record whose lease had lapsed or whose holder transaction had ended. */
  takeover: 'nest-idempotency:takeover',
  /** Storing an outcome, or releasing a claim, failed after every retry: the key stays in progress until its lease lapses. */
  finalizeGaveUp: 'nest-idempotency:finalize-gave-up',
  /** A stored outcome could not be read (it cannot be decrypted, say): it is never replayed. */
  recordUnreadable: 'nest-idempotency:record-unreadable',
  /** A store operation failed or timed out, and the attempt was refused (503) or its finalize deferred. */
  storeUnavailable: 'nest-idempotency:store-unavailable',
  /** The completer claimed an abandoned operation again: completed it, failed, or failed on its last attempt. */
  completion: 'nest-idempotency:completion',
} as const;

export interface LockLostEvent {
  scope: IdempotencyScope;
  attempt: string;
  /** What found the claim lost. */
  during: 'renew' | 'complete' | 'release';
}

export interface TakeoverEvent {
  scope: IdempotencyScope;
  /** The attempt that took the record over. */
  attempt: string;
}

export interface FinalizeGaveUpEvent {
  scope: IdempotencyScope;
  attempt: string;
  /** What the finalize was doing: storing the outcome, or releasing the claim. */
  finalize: 'store' | 'release';
  error: unknown;
}

export interface RecordUnreadableEvent {
  scope: IdempotencyScope;
  /** Why, in a sentence (never the record's content). */
  reason: string;
}

export interface StoreUnavailableEvent {
  /** The store operation, e.g. `claim`, `complete`, `release`, `renew`, `beginTransaction`. */
  operation: string;
  /** The scope the operation was for, when it was for one. */
  scope?: IdempotencyScope;
  error: unknown;
}

export interface CompletionEvent {
  scope: IdempotencyScope;
  /** The completer's attempt's number among those that claimed the operation. */
  attempt: number;
  /** `gave-up`: it failed on its last attempt (`completer.maxAttempts`), and is left in progress for an operator. */
  outcome: 'completed' | 'failed' | 'gave-up';
  /** Why it failed. */
  error?: unknown;
}

export interface IdempotencyEventPayloads {
  lockLost: LockLostEvent;
  takeover: TakeoverEvent;
  finalizeGaveUp: FinalizeGaveUpEvent;
  recordUnreadable: RecordUnreadableEvent;
  storeUnavailable: StoreUnavailableEvent;
  completion: CompletionEvent;
}

/**
 * The channels, held for the process's life: Node keeps a channel only weakly, so that one looked up anew at each
 * event could be another object than the one subscribed to, once the garbage collector has taken it, and its events
 * would reach nobody (an application's alerts falling silent after a while).
 */
const channels = Object.fromEntries(
  Object.entries(IDEMPOTENCY_CHANNELS).map(([event, name]) => [event, channel(name)]),
) as Record<keyof IdempotencyEventPayloads, Channel>;

/** Publishes an event on its channel; the payload is built only when somebody subscribes. */
export function publishIdempotencyEvent<E extends keyof IdempotencyEventPayloads>(
  event: E,
  payload: () => IdempotencyEventPayloads[E],
): void {
  const target = channels[event];
  if (target.hasSubscribers) target.publish(payload());
}
