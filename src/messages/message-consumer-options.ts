import { HttpException } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { callable, nonEmptyString, oneOf, positive, positiveInteger } from '../protocol/option-checks.js';
import { describedValue } from '../protocol/described-value.js';
import { IdempotencyOutcomeWithheldError } from '../protocol/idempotency.errors.js';
import { TRY_AGAIN_STATUSES } from '../transport-kit/final-statuses.js';
import type { MessageConsumerOptions, MessageKeySource } from './message-options.interface.js';

/** A consumer transport's options, checked, with their defaults. */
export interface ResolvedConsumerOptions<Context> {
  key: MessageKeySource<Context>;
  withoutKey: 'reject' | 'run';
  isFinalError: (error: unknown) => boolean;
  holdSeconds: number;
  /** `undefined`: the store's capacity. */
  concurrency: number | undefined;
}

/**
 * The outcomes of a message that its redelivery would only repeat: an `RpcException` (how a handler answers its caller
 * with an error), an `HttpException` of a client's error (a `ValidationPipe`'s 400 for a payload it refuses:
 * the same payload comes back), but those that say "later" (408, 425, 429), and the withheld outcome of an
 * `execute()` it called (its redeliveries would be refused the same). Anything else is a fault, retried.
 */
export function isFinalErrorByDefault(error: unknown): boolean {
  if (error instanceof RpcException || error instanceof IdempotencyOutcomeWithheldError) return true;
  if (!(error instanceof HttpException)) return false;
  const status = error.getStatus();
  return status >= 400 && status < 500 && !TRY_AGAIN_STATUSES.has(status);
}

/** Checks a consumer transport's options (at start-up), and fills in the defaults, `defaultKey` the broker's. */
export function resolveConsumerOptions<Context>(
  options: MessageConsumerOptions<Context>,
  defaultKey: MessageKeySource<Context>,
): ResolvedConsumerOptions<Context> {
  return {
    key: checkKeySource(options.key ?? defaultKey),
    withoutKey: oneOf('withoutKey', options.withoutKey ?? 'reject', ['reject', 'run'] as const),
    isFinalError: callable('isFinalError', options.isFinalError ?? isFinalErrorByDefault),
    holdSeconds: positive('holdSeconds', options.holdSeconds ?? 600),
    concurrency: options.concurrency === undefined ? undefined : positiveInteger('concurrency', options.concurrency),
  };
}

function checkKeySource<Context>(key: MessageKeySource<Context>): MessageKeySource<Context> {
  if (typeof key === 'function') return key;
  if (typeof key === 'object' && key !== null) {
    if ('property' in key && !('header' in key)) return { property: nonEmptyString('key.property', key.property) };
    if ('header' in key && !('property' in key)) return { header: nonEmptyString('key.header', key.header) };
  }
  throw new RangeError(
    'Idempotency option key must be { property: name }, { header: name } or a function of the payload and context ' +
      `that returns the key, got ${describedValue(key)}`,
  );
}

/** How refusals and logs name where a message's key is. */
export function keyNameOf<Context>(key: MessageKeySource<Context>): string {
  if (typeof key === 'function') return 'key (from the key function)';
  return 'property' in key ? `${key.property} property` : `${key.header} header`;
}
