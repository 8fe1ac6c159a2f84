import type { DrainParticipant } from '../protocol/running-attempts.js';
import type { MessageConsumer } from './message-delivery.interface.js';

/** Why a message in hand was not admitted: the drain's wait is over, and it goes back to the broker. */
export class GivenBackAtShutdown extends Error {
  constructor() {
    super('the drain of shutdown is over');
  }
}

/**
 * A consumer transport's messages in hand: delivered by the broker and not yet settled. It bounds how many are
 * claimed and run at once (the others wait their turn, unsettled, rather than be refused: a refusal would spend one
 * of their deliveries), holds those it cannot claim now between their claims, and lets shutdown's drain stop the
 * broker's consumers, wait for what is in hand, and give back only what is left when its wait is over.
 */
export class MessagesInHand implements DrainParticipant {
  private readonly messages = new Set<object>();
  private readonly consumers = new Set<MessageConsumer>();
  /** The consumers stopped by the drain, until no more messages can arrive from them. */
  private readonly stopping: Array<Promise<void>> = [];
  private readonly idleWaiters: Array<() => void> = [];
  /** Messages waiting for their turn to be claimed and run, first come first served. */
  private readonly queue: Array<{ admit: () => void; refuse: (error: Error) => void }> = [];
  /** Pauses of held messages, ended early when the drain's wait is over. */
  private readonly pauses = new Set<() => void>();
  private running = 0;
  private draining = false;
  private closing = false;

  constructor(
    /** Messages claimed and run at once. */
    readonly concurrency: number,
  ) {}

  get inHand(): number {
    return this.messages.size;
  }

  /** `message` is in hand, from `consumer` (stopped at once if the drain has begun: it is the drain's to wait for). */
  taken(message: object, consumer: MessageConsumer): void {
    this.messages.add(message);
    if (this.draining && !this.consumers.has(consumer)) this.stopping.push(consumer.stop());
    this.consumers.add(consumer);
  }

  /** `message` was settled. */
  settled(message: object): void {
    this.messages.delete(message);
    if (this.messages.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  /** Resolves once the message may be claimed and run, with the release of its turn; rejects once the drain is over. */
  admitted(): Promise<() => void> {
    if (this.closing) return Promise.reject(new GivenBackAtShutdown());
    if (this.running < this.concurrency) return Promise.resolve(this.turn());
    return new Promise((resolve, reject) => this.queue.push({ admit: () => resolve(this.turn()), refuse: reject }));
  }

  /**
   * Waits `delayMs` before a held message is claimed again; resolves false at once, or when its wait is over, once
   * shutdown's drain is over (the message then goes back to the broker, for another instance).
   */
  pause(delayMs: number): Promise<boolean> {
    if (this.closing) return Promise.resolve(false);
    return new Promise((resolve) => {
      const end = (again: boolean) => {
        clearTimeout(timer);
        this.pauses.delete(stop);
        resolve(again);
      };
      const stop = () => end(false);
      const timer = setTimeout(() => end(true), delayMs);
      this.pauses.add(stop);
    });
  }

  stopTaking(): void {
    this.draining = true;
    for (const consumer of this.consumers) this.stopping.push(consumer.stop());
  }

  /** Resolves once the consumers stopped can deliver no more, and nothing is in hand. */
  async idle(): Promise<void> {
    for (let stopped = 0; ;) {
      const stopping = this.stopping.length;
      await Promise.all(this.stopping.slice(stopped));
      stopped = stopping;
      if (this.messages.size > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
      // A message taken meanwhile may have come from a consumer not stopped before: it is stopped now, and waited for.
      if (this.stopping.length === stopped && this.messages.size === 0) return;
    }
  }

  giveBack(): void {
    this.closing = true;
    for (const stop of [...this.pauses]) stop();
    for (const waiting of this.queue.splice(0)) waiting.refuse(new GivenBackAtShutdown());
  }

  private turn(): () => void {
    this.running += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running -= 1;
      this.queue.shift()?.admit();
    };
  }
}
