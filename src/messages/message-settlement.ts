import type { MessageConsumer, MessageDelivery } from './message-delivery.interface.js';

/** How one handler would settle its message. */
type Vote = { settle: 'ack' | 'ackAfterReply' } | { settle: 'retryLater'; delayMs: number } | { settle: 'reject' };

/**
 * How long a message whose handlers seen have all settled their parts waits for the others expected to be seen: Nest
 * starts every handler of a message at once, so one not seen by then was refused before the module's interceptor (a
 * guard), or is not one of the message's handlers after all.
 */
const ABSENT_HANDLERS_WAIT_MS = 1_000;

/**
 * The settlement of one message among its idempotent handlers (Nest runs every event handler of a pattern with the
 * same message): each handler settles its own view of the delivery once, and the message is settled when every
 * handler expected has: given back (after the longest delay asked) if any must run again, rejected if any refused it
 * for good, acknowledged when all stored their outcomes. A handler that ran is replayed on a redelivery.
 */
export class MessageSettlement {
  private readonly votes = new Map<string, Vote>();
  /** The handlers seen, settling their parts or about to. */
  private readonly seen = new Set<string>();
  private settled = false;
  private absentTimer?: NodeJS.Timeout;

  constructor(
    /** The broker's delivery, settled once. */
    private readonly delivery: MessageDelivery,
    /** The handlers expected to settle it (`Consumer.method`); those seen settling it are expected too. */
    private readonly expected: ReadonlySet<string>,
    /** Told once the message is settled. */
    private readonly onSettled: () => void,
    /** Told of the handlers expected that were never seen, when the message is settled without them. */
    private readonly onAbsent: (consumers: string[]) => void = () => undefined,
  ) {}

  /** The delivery as `consumer`, one of the message's handlers, settles it: its first settlement is its vote. */
  of(consumer: string): MessageDelivery {
    this.seen.add(consumer);
    clearTimeout(this.absentTimer);
    const { delivery } = this;
    const vote = (cast: Vote) => this.vote(consumer, cast);
    return {
      get deliveries(): number {
        return delivery.deliveries;
      },
      get consumer(): MessageConsumer {
        return delivery.consumer;
      },
      property: (name) => delivery.property(name),
      header: (name) => delivery.header(name),
      ack: () => vote({ settle: 'ack' }),
      ackAfterReply: () => vote({ settle: 'ackAfterReply' }),
      retryLater: (delayMs) => vote({ settle: 'retryLater', delayMs }),
      reject: () => vote({ settle: 'reject' }),
    };
  }

  private vote(consumer: string, cast: Vote): void {
    if (this.settled || this.votes.has(consumer)) return;
    this.votes.set(consumer, cast);
    const absent = [...this.expected].filter((expected) => !this.votes.has(expected));
    if (absent.length === 0) return this.settle();
    // Every handler seen has settled its part: those expected and not seen may never come (refused by a guard).
    if ([...this.seen].every((seen) => this.votes.has(seen))) {
      clearTimeout(this.absentTimer);
      this.absentTimer = setTimeout(() => {
        this.onAbsent(absent.filter((expected) => !this.seen.has(expected)));
        this.settle();
      }, ABSENT_HANDLERS_WAIT_MS);
      this.absentTimer.unref();
    }
  }

  private settle(): void {
    if (this.settled) return;
    this.settled = true;
    const votes = [...this.votes.values()];
    const retries = votes.flatMap((vote) => (vote.settle === 'retryLater' ? [vote.delayMs] : []));
    if (retries.length > 0) this.delivery.retryLater(Math.max(...retries));
    else if (votes.some((vote) => vote.settle === 'reject')) this.delivery.reject();
    else if (votes.some((vote) => vote.settle === 'ackAfterReply')) this.delivery.ackAfterReply();
    else this.delivery.ack();
    this.onSettled();
  }
}
