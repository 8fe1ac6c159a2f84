import { errorResponse, refusalAnswer } from '../../src/http/answers/http-answers.js';
import { resolveHttpPolicy } from '../../src/http/requests/http-policy.js';
import {
  IdempotencyKeyRequiredError,
  IdempotencyKeyReuseError,
  IdempotencyMisconfiguredError,
  IdempotencyStoreUnavailableError,
  IdempotencyRequestInProgressError,
} from '../../src/index.js';

const terms = { key: 'Idempotency-Key', usedWith: 'request (method, path, query or body)' };
const profileOf = (options: Parameters<typeof resolveHttpPolicy>[0]) => resolveHttpPolicy(options).profile;

describe('HTTP profiles', () => {
  it('default: today’s answers, and Idempotent-Replay', () => {
    const policy = resolveHttpPolicy({});
    expect(policy.replayHeaderName).toBe('Idempotent-Replay');
    expect(refusalAnswer(new IdempotencyRequestInProgressError(2, terms), policy.profile)).toEqual({
      status: 409,
      body: {
        statusCode: 409,
        error: 'request_in_progress',
        message:
          'Another attempt with this Idempotency-Key is still being processed. Retry after 2 s to receive its outcome.',
      },
      headers: { 'retry-after': '2' },
    });
  });

  it('stripe: a reused key is 400 idempotency_error, retries are steered by Stripe-Should-Retry', () => {
    const stripe = profileOf({ profile: 'stripe' });
    expect(resolveHttpPolicy({ profile: 'stripe' }).replayHeaderName).toBe('Idempotent-Replayed');
    expect(refusalAnswer(new IdempotencyKeyReuseError(terms), stripe)).toMatchObject({
      status: 400,
      body: { error: { type: 'idempotency_error', code: 'idempotency_key_reuse' } },
      headers: { 'stripe-should-retry': 'false' },
    });
    expect(refusalAnswer(new IdempotencyStoreUnavailableError(2), stripe)).toMatchObject({
      status: 503,
      body: { error: { type: 'api_error', code: 'idempotency_store_unavailable' } },
      headers: { 'stripe-should-retry': 'true', 'retry-after': '2' },
    });
    expect(refusalAnswer(new IdempotencyMisconfiguredError('rawBody: true'), stripe)).toMatchObject({
      status: 500,
      headers: { 'stripe-should-retry': 'false' },
    });
  });

  it('ietf: problem details, with a type under the application’s base', () => {
    const ietf = profileOf({ profile: 'ietf', problemTypeBase: 'https://api.example.com/problems/' });
    expect(refusalAnswer(new IdempotencyKeyRequiredError('Idempotency-Key header'), ietf)).toEqual({
      status: 400,
      body: {
        type: 'https://api.example.com/problems/idempotency_key_required',
        title: 'Idempotency-Key is missing',
        status: 400,
        detail: expect.stringContaining('requires an Idempotency-Key header'),
        code: 'idempotency_key_required',
      },
      headers: { 'content-type': 'application/problem+json' },
    });
  });

  it('words the answers sent after the handler ran (a finalize that failed, the key taken over) as the profile does', () => {
    const ietf = errorResponse(new IdempotencyStoreUnavailableError(2), profileOf({ profile: 'ietf' }));
    expect(ietf).toMatchObject({
      status: 503,
      headers: { 'content-type': 'application/problem+json', 'retry-after': '2' },
    });
    expect(JSON.parse(ietf.body.toString())).toMatchObject({ status: 503, code: 'idempotency_store_unavailable' });
    const stripe = errorResponse(new IdempotencyRequestInProgressError(2, terms), profileOf({ profile: 'stripe' }));
    expect(stripe).toMatchObject({
      status: 409,
      headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-should-retry': 'true', 'retry-after': '2' },
    });
    expect(JSON.parse(stripe.body.toString())).toMatchObject({
      error: { type: 'idempotency_error', code: 'request_in_progress' },
    });
  });

  it('keeps a replay header the application names, whatever the profile', () => {
    expect(resolveHttpPolicy({ profile: 'stripe', replayHeaderName: 'X-Replayed' }).replayHeaderName).toBe(
      'X-Replayed',
    );
  });

  it('refuses an unknown profile and an empty problem type base at start-up', () => {
    expect(() => resolveHttpPolicy({ profile: 'problem' as 'ietf' })).toThrow(
      'Idempotency option profile must be one of default, stripe, ietf',
    );
    expect(() => resolveHttpPolicy({ problemTypeBase: '' })).toThrow(
      'Idempotency option problemTypeBase must be a non-empty string',
    );
  });
});
