import type { IdempotencyErrorCode } from '../../protocol/idempotency.errors.js';
import type { HttpProfile } from './http-profile.js';

/** Stripe's error types, which stripe-node turns into its error classes (with the status). */
type StripeErrorType = 'invalid_request_error' | 'idempotency_error' | 'api_error';

interface StripeRefusal {
  status: number;
  type: StripeErrorType;
  /** `Stripe-Should-Retry`: stripe-node retries (within `maxNetworkRetries`) on `true`, never on `false`. */
  shouldRetry: boolean;
}

/**
 * Each refusal as Stripe answers its like, so that stripe-node raises the error class its users catch and retries
 * only what a retry can fix: a reused key is `StripeIdempotencyError` (400 `idempotency_error`), a key in progress a
 * 409 it retries, a client's mistake a 400 `StripeInvalidRequestError`, the server's set-up a 500 it must not retry.
 */
const STRIPE_REFUSALS: Readonly<Record<IdempotencyErrorCode, StripeRefusal>> = {
  idempotency_key_required: { status: 400, type: 'invalid_request_error', shouldRetry: false },
  idempotency_key_invalid: { status: 400, type: 'invalid_request_error', shouldRetry: false },
  idempotency_body_unsupported: { status: 400, type: 'invalid_request_error', shouldRetry: false },
  idempotency_misconfigured: { status: 500, type: 'api_error', shouldRetry: false },
  idempotency_account_unresolved: { status: 500, type: 'api_error', shouldRetry: false },
  idempotency_operation_invalid: { status: 500, type: 'api_error', shouldRetry: false },
  idempotency_key_reuse: { status: 400, type: 'idempotency_error', shouldRetry: false },
  request_in_progress: { status: 409, type: 'idempotency_error', shouldRetry: true },
  idempotency_store_unavailable: { status: 503, type: 'api_error', shouldRetry: true },
  idempotency_shutting_down: { status: 503, type: 'api_error', shouldRetry: true },
  idempotency_record_unreadable: { status: 500, type: 'api_error', shouldRetry: false },
  idempotency_outcome_withheld: { status: 500, type: 'api_error', shouldRetry: false },
};

/** Stripe's answers: `{ "error": { type, code, message } }`, `Stripe-Should-Retry`, and `Idempotent-Replayed`. */
export const stripeProfile: HttpProfile = {
  name: 'stripe',
  replayHeaderName: 'Idempotent-Replayed',
  refusal(error) {
    const { status, type, shouldRetry } = STRIPE_REFUSALS[error.code];
    return {
      status,
      body: { error: { type, code: error.code, message: error.message } },
      headers: { 'stripe-should-retry': String(shouldRetry) },
    };
  },
};
