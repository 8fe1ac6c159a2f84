import { RpcException } from '@nestjs/microservices';
import {
  BadRequestException,
  HttpException,
  InternalServerErrorException,
  ServiceUnavailableException,
  UnprocessableEntityException,
} from '@nestjs/common';
import {
  isFinalErrorByDefault,
  keyNameOf,
  resolveConsumerOptions,
} from '../../src/messages/message-consumer-options.js';
import {
  IdempotencyOutcomeWithheldError,
  IdempotencyStoreUnavailableError,
} from '../../src/protocol/idempotency.errors.js';
import { outcomeOf, storableError, storedOutcome } from '../../src/messages/message-outcomes.js';
import { redeliveryDelayMs } from '../../src/messages/message-answers.js';

describe('message consumer options', () => {
  it('fill in the broker key, rejection of keyless messages, and RpcException as the final error', () => {
    const options = resolveConsumerOptions({}, { property: 'messageId' });
    expect(options.key).toEqual({ property: 'messageId' });
    expect(options.withoutKey).toBe('reject');
    expect(options.isFinalError(new RpcException('no'))).toBe(true);
    expect(options.isFinalError(new Error('timeout'))).toBe(false);
  });

  it.each([
    [new BadRequestException('amount must be positive'), true],
    [new UnprocessableEntityException(), true],
    [new HttpException('later', 429), false],
    [new HttpException('too early', 425), false],
    [new ServiceUnavailableException(), false],
    [new InternalServerErrorException(), false],
    [new HttpException('timeout', 408), false],
    [new HttpException('teapot', 418), true],
    [new HttpException('no content', 204), false],
    [new IdempotencyOutcomeWithheldError(), true],
    [new IdempotencyStoreUnavailableError(2), false],
  ])("take %s for a message's final outcome: %s", (error, final) => {
    expect(isFinalErrorByDefault(error)).toBe(final);
  });

  it.each([
    [{ key: { property: '' } }, /key.property/],
    [{ key: { property: 'a', header: 'b' } }, /must be \{ property: name \}/],
    [{ key: 'messageId' }, /must be \{ property: name \}/],
    [{ withoutKey: 'drop' }, /withoutKey/],
    [{ isFinalError: true }, /isFinalError/],
  ])('refuse %j at start-up', (options, message) => {
    expect(() => resolveConsumerOptions(options as never, { property: 'messageId' })).toThrow(message);
  });

  it('name where the key is, for refusals and logs', () => {
    expect(keyNameOf({ property: 'messageId' })).toBe('messageId property');
    expect(keyNameOf({ header: 'Nats-Msg-Id' })).toBe('Nats-Msg-Id header');
    expect(keyNameOf(() => undefined)).toBe('key (from the key function)');
  });
});

describe('message outcomes', () => {
  it.each([[{ paid: 3, to: ['a'] }], ['text'], [0], [null], [undefined]])(
    'store and read back the value %j',
    (value) => {
      expect(outcomeOf(storedOutcome({ kind: 'value', value }))).toEqual({ kind: 'value', value });
    },
  );

  it('store a final error and read it back', () => {
    const error = storableError(new RpcException({ reason: 'insufficient_funds' }));
    expect(outcomeOf(storedOutcome({ kind: 'error', error }))).toEqual({
      kind: 'error',
      error: { reason: 'insufficient_funds' },
    });
  });

  it('keep of an error that is not an RpcException its name and message', () => {
    expect(storableError(new TypeError('bad payout'))).toEqual({ name: 'TypeError', message: 'bad payout' });
  });

  it("keep of the module's refusal its code and message, as a request's caller gets a refusal", () => {
    const refusal = new IdempotencyOutcomeWithheldError();
    expect(storableError(refusal)).toEqual({ code: 'idempotency_outcome_withheld', message: refusal.message });
  });

  it('store a value as the JSON Nest sends for it, so that a replay sends the same bytes', () => {
    const value = { b: 1, a: [1.5, 'x'] };
    expect(storedOutcome({ kind: 'value', value }).body.toString()).toBe(JSON.stringify(value));
  });
});

describe('the delay before a message given back is redelivered', () => {
  it.each([
    [1, 2_000],
    [2, 4_000],
    [3, 8_000],
    [5, 32_000],
    [6, 60_000],
    [1000, 60_000],
  ])(
    'is retryAfterSeconds doubled at each delivery, up to a minute: delivery %i waits %i ms',
    (deliveries, delayMs) => {
      expect(redeliveryDelayMs(2, { deliveries })).toBe(delayMs);
    },
  );

  it('rides out a 30 s outage within a delivery limit of 5, where a constant 2 s would dead-letter it after 10 s', () => {
    const waited = [1, 2, 3, 4].reduce((sum, deliveries) => sum + redeliveryDelayMs(2, { deliveries }), 0);
    expect(waited).toBe(30_000);
  });
});
