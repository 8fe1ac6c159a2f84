import type { Logger } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { NEVER, type Observable, of, throwError } from 'rxjs';
import { type IdempotencyError, IdempotencyOutcomeWithheldError } from '../protocol/idempotency.errors.js';
import type { MessageDelivery } from './message-delivery.interface.js';
import { finalError, type MessageOutcome } from './message-outcomes.js';

/**
 * What an event's handler answers, whatever became of it: one value (nothing), then the end. Nest joins the answers of
 * a pattern's event handlers (`forkJoin`), which ends at the first that ends without a value, and `JetStreamServer`
 * settles a message no one settled when that join ends: before another handler of the message had settled its part.
 */
export const EVENT_HANDLED: Observable<unknown> = of(undefined);

/** The longest a message is given back for: past it, the broker's delivery limit bounds the retries alone. */
const MAX_REDELIVERY_DELAY_MS = 60_000;

/**
 * How long a message given back waits before its redelivery: `retryAfterSeconds`, doubled at each delivery of the
 * message (up to a minute). Each give-back counts toward the queue's delivery limit, whoever is at fault: doubling
 * makes a limit of 5 ride out a store outage (a failover) or a dead consumer's claim of half a minute, not 10 s.
 */
export function redeliveryDelayMs(retryAfterSeconds: number, delivery: Pick<MessageDelivery, 'deliveries'>): number {
  const doublings = Math.min(Math.max(delivery.deliveries - 1, 0), 16);
  return Math.min(retryAfterSeconds * 1000 * 2 ** doublings, MAX_REDELIVERY_DELAY_MS);
}

/** One handler's view of a message, as it is settled and answered: `request` when a caller waits for a reply. */
export interface AnsweredMessage {
  request: boolean;
  delivery: MessageDelivery;
  /** How logs name where it went: its scope's endpoint, or its consumer. */
  where: string;
}

/**
 * How a message is settled and what its handler answers Nest, for each way its serving ends: an outcome (stored or
 * replayed), a failure a redelivery may get past, or a refusal of the protocol.
 */
export class MessageAnswers {
  constructor(private readonly logger: Logger) {}

  /**
   * The message's outcome, stored (or replayed), answered and acknowledged: an event's at once; a request's once its
   * reply is sent (each broker's delivery knows when that is), so that a crash between the two redelivers the request,
   * whose record answers it again, rather than leave its caller without a reply.
   */
  acknowledged({ request, delivery, where }: AnsweredMessage, outcome: MessageOutcome, firstTime: boolean) {
    if (!request) {
      delivery.ack();
      if (outcome.kind === 'error' && firstTime) {
        this.logger.warn(
          `The handler of a message to ${where} failed for good (its error is final): the message is acknowledged, ` +
            `and its redeliveries are too, without running it: ${JSON.stringify(outcome.error)}`,
        );
      }
      return EVENT_HANDLED;
    }
    delivery.ackAfterReply();
    return outcome.kind === 'error' ? throwError(() => finalError(outcome.error)) : of(outcome.value);
  }

  /**
   * A handler that failed, not for good: its claim is released, and its message redelivered after `retryAfterSeconds`
   * (counting toward the broker's delivery limit). A request's caller keeps waiting for the reply of the delivery
   * that succeeds.
   */
  redelivered({ request, delivery, where }: AnsweredMessage, retryAfterSeconds: number, error: unknown) {
    const delayMs = redeliveryDelayMs(retryAfterSeconds, delivery);
    this.logger.warn(
      `The handler of a message to ${where} failed; it goes back to the broker, to be redelivered in ` +
        `${delayMs / 1000} s (a delivery of its limit): ${error}`,
    );
    delivery.retryLater(delayMs);
    return request ? NEVER : EVENT_HANDLED;
  }

  /**
   * A refusal settles the message: one that may succeed later (in progress, the store unavailable, shutting down)
   * is given back, to be redelivered after `retryAfterSeconds`, doubled at each delivery (at once when shutting down);
   * one that never will (a key reused with another payload, no key, an invalid key) is rejected, so that the broker
   * dead-letters it; one whose work was done (its outcome withheld) is acknowledged, since a redelivery gets the same
   * refusal. A request's caller gets the latter two as an `RpcException` (`{ code, message }`), and keeps waiting
   * through the former, for the reply of the delivery that runs.
   */
  refused({ request, delivery, where }: AnsweredMessage, error: IdempotencyError): unknown {
    if (error.retryAfterSeconds !== undefined) {
      delivery.retryLater(
        error.code === 'idempotency_shutting_down' ? 0 : redeliveryDelayMs(error.retryAfterSeconds, delivery),
      );
      return request ? NEVER : EVENT_HANDLED;
    }
    const answer = request ? new RpcException({ code: error.code, message: error.message }) : EVENT_HANDLED;
    if (error instanceof IdempotencyOutcomeWithheldError) {
      if (request) delivery.ackAfterReply();
      else delivery.ack();
      return answer;
    }
    this.logger.warn(`A message to ${where} was rejected (${error.code}): ${error.message}`);
    delivery.reject();
    return answer;
  }
}
