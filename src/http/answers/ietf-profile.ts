import type { IdempotencyErrorCode } from '../../protocol/idempotency.errors.js';
import { httpStatusOf } from './http-answers.js';
import type { HttpProfile } from './http-profile.js';

/** The `type` of each problem is this base followed by the refusal's code, unless the application sets its own. */
export const DEFAULT_PROBLEM_TYPE_BASE = 'urn:nest-idempotency:problem:';

/** Each problem's `title`, the same for every occurrence of it (RFC 9457 §3.1.3), as the Idempotency-Key draft words them. */
const PROBLEM_TITLES: Readonly<Record<IdempotencyErrorCode, string>> = {
  idempotency_key_required: 'Idempotency-Key is missing',
  idempotency_key_invalid: 'Idempotency-Key is invalid',
  idempotency_body_unsupported: 'Request body cannot be fingerprinted',
  idempotency_misconfigured: 'Server is misconfigured for idempotent requests',
  idempotency_account_unresolved: 'Account of the request could not be resolved',
  idempotency_operation_invalid: 'Idempotent operation is invalid',
  idempotency_key_reuse: 'Idempotency-Key is already used',
  request_in_progress: 'A request is outstanding for this Idempotency-Key',
  idempotency_store_unavailable: 'Idempotency store is unavailable',
  idempotency_shutting_down: 'Server is shutting down',
  idempotency_record_unreadable: 'Stored outcome cannot be read',
  idempotency_outcome_withheld: 'Outcome withheld',
};

/**
 * RFC 9457 problem details, as draft-ietf-httpapi-idempotency-key-header shows them (400 missing key, 422 reused
 * key, 409 outstanding request): `application/problem+json` with `type`, `title`, `status`, `detail`, and the
 * refusal's stable code as the extension member `code`.
 */
export function ietfProfile(problemTypeBase: string): HttpProfile {
  return {
    name: 'ietf',
    replayHeaderName: 'Idempotent-Replay',
    refusal(error) {
      const status = httpStatusOf(error);
      return {
        status,
        body: {
          type: `${problemTypeBase}${error.code}`,
          title: PROBLEM_TITLES[error.code],
          status,
          detail: error.message,
          code: error.code,
        },
        headers: { 'content-type': 'application/problem+json' },
      };
    },
  };
}
