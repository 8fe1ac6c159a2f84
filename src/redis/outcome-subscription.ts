import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import { within } from '../protocol/store-bounds.js';
import { type HeldRecordRead, type PolledWait, polledWait } from '../store-kit/record-polling.js';
import { ScopeWaits } from '../store-kit/scope-waits.js';
import type { RedisClient } from './record-scripts.js';

interface OutcomeWait extends PolledWait {
  wake(): void;
}

/**
 * Waits for in-flight outcomes on Redis pub/sub: one subscriber connection of its own (a duplicate of the
 * application's client), subscribed to the store's channel on the first wait, on which the scripts publish the key
 * of each awaited record they complete or release. ioredis reconnects it and subscribes again; what was published
 * meanwhile is missed, so every wait is woken once it is back (its attempt claims again). While it is not subscribed
 * (not yet, lost, or refused by a server without pub/sub), a wait whose record was found held polls the record instead.
 */
export class OutcomeSubscription {
  private readonly waits = new ScopeWaits<OutcomeWait>();
  private subscriber?: RedisClient;
  private subscribing?: Promise<void>;
  private subscribed = false;
  /** Subscribed once: a later `ready` is a reconnect. */
  private wasSubscribed = false;
  /** A wait has asked for the subscription: from then on, until `close()`, health checks expect it. */
  private needed = false;
  private closed = false;

  constructor(
    private readonly client: RedisClient,
    private readonly channel: string,
    private readonly isHeld: HeldRecordRead,
  ) {}

  wait(
    scope: IdempotencyScope,
    key: string,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    this.needed = true;
    const { changed, cancel } = this.waits.start(key, timeoutMs, (control) => ({
      ...polledWait(this.isHeld, scope, control),
      wake: control.end,
    }));
    // Listening that fails leaves the wait to its polling and its timeout.
    const listening = Promise.race([this.subscribe(), changed]).then(
      () => undefined,
      () => undefined,
    );
    return { changed, listening, cancel };
  }

  /** The record at `key` was found held and marked awaited: its waits poll it unless a message will tell them. */
  awaited(key: string): void {
    if (this.subscribed) return;
    for (const wait of this.waits.on(key)) wait.poll();
  }

  /**
   * Whether it is subscribed, told within `timeoutMs` (a round trip on the subscriber connection, which a network gone
   * silent does not answer); `undefined` when nothing needs it yet. Closed, it no longer listens.
   */
  async isListening(timeoutMs: number, needed: boolean): Promise<boolean | undefined> {
    if (!(this.needed || needed)) return undefined;
    if (this.closed) return false;
    try {
      const bound = () => new Error('not subscribed in time');
      await within(this.subscribe(), timeoutMs, bound);
      await within((this.subscriber as RedisClient).ping(), timeoutMs, bound);
      return this.subscribed;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.waits.endAll();
    const subscriber = this.subscriber;
    this.subscriber = undefined;
    this.subscribed = false;
    if (subscriber) await subscriber.quit().catch(() => subscriber.disconnect());
  }

  private subscribe(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('The Redis store is closed'));
    this.subscribing ??= this.openSubscriber().catch((error: unknown) => {
      this.subscribing = undefined;
      throw error;
    });
    return this.subscribing;
  }

  private async openSubscriber(): Promise<void> {
    await this.subscriberConnection().subscribe(this.channel);
    this.subscribed = this.wasSubscribed = true;
  }

  /** The subscriber connection, made once, with what it does on a message and after a reconnect. */
  private subscriberConnection(): RedisClient {
    if (this.subscriber) return this.subscriber;
    const subscriber = (this.subscriber = this.client.duplicate());
    subscriber.on('message', (channel: string, key: string) => {
      if (channel !== this.channel) return;
      for (const wait of this.waits.on(key)) wait.wake();
    });
    subscriber.on('error', () => undefined); // its state is read from `close` and `ready`; the client reconnects
    subscriber.on('close', () => {
      this.subscribed = false;
    });
    subscriber.on('ready', () => {
      if (this.subscribed || !this.wasSubscribed) return;
      // Back after a reconnect: what was published while it was away is lost, so every wait is woken once it listens.
      subscriber.subscribe(this.channel).then(
        () => {
          this.subscribed = true;
          this.waits.endAll();
        },
        () => undefined,
      );
    });
    return subscriber;
  }
}
