/** The stable, machine-readable codes of the module's refusals. */
export type IdempotencyErrorCode =
  | 'idempotency_key_required'
  | 'idempotency_key_invalid'
  | 'idempotency_body_unsupported'
  | 'idempotency_misconfigured'
  | 'idempotency_account_unresolved'
  | 'idempotency_operation_invalid'
  | 'idempotency_key_reuse'
  | 'request_in_progress'
  | 'idempotency_store_unavailable'
  | 'idempotency_shutting_down'
  | 'idempotency_record_unreadable'
  | 'idempotency_outcome_withheld';

/**
 * A refusal of the module: a stable `code`, a human message, and, when retrying later may succeed, how long to wait.
 * Protocol-neutral: each transport renders it as its clients expect (its `refusal()`); `IdempotencyService.execute()`
 * throws it as it is.
 */
export class IdempotencyError extends Error {
  constructor(
    readonly code: IdempotencyErrorCode,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** `keyName` says where the key is expected: `Idempotency-Key header` (a request), `messageId property` (a message). */
export class IdempotencyKeyRequiredError extends IdempotencyError {
  constructor(keyName: string) {
    super(
      'idempotency_key_required',
      `This endpoint requires an ${keyName}: send a unique key per operation and reuse it on every retry.`,
    );
  }
}

export class IdempotencyKeyInvalidError extends IdempotencyError {
  constructor(keyName: string, reason: string) {
    super('idempotency_key_invalid', `The ${keyName} is invalid: ${reason}.`);
  }
}

export class IdempotencyBodyUnavailableError extends IdempotencyError {
  constructor(contentType: string) {
    super(
      'idempotency_body_unsupported',
      `The body of this request (${contentType || 'sent without a Content-Type'}) cannot be fingerprinted for idempotency: ` +
        'send it as application/json or application/x-www-form-urlencoded.',
    );
  }
}

/**
 * The application is set up in a way the module cannot work with (its body parsers keep no raw bytes, say): the
 * client is not at fault. `setupFix`, which names the fix, is for the application's log, never for the client.
 */
export class IdempotencyMisconfiguredError extends IdempotencyError {
  constructor(readonly setupFix: string) {
    super(
      'idempotency_misconfigured',
      'This server is misconfigured for idempotent requests, so the request was not processed. ' +
        'Retrying will not help until the server is fixed.',
    );
  }
}

/** The application's `accountResolver` failed or gave no account, so the request could not be scoped (and did not run). */
export class IdempotencyAccountUnresolvedError extends IdempotencyError {
  constructor() {
    super(
      'idempotency_account_unresolved',
      'This server could not tell which account the request belongs to, so the request was not processed.',
    );
  }
}

/**
 * An `execute()` operation whose name, key or account cannot scope a record (a key a transport would refuse, say):
 * refused before anything is claimed, and for good, since its retries would be refused alike.
 */
export class IdempotencyOperationInvalidError extends IdempotencyError {
  constructor(
    readonly field: 'name' | 'key' | 'account',
    reason: string,
  ) {
    super(
      'idempotency_operation_invalid',
      `The operation's ${field} is invalid: ${reason}. Nothing was claimed, and retrying will not help.`,
    );
  }
}

/**
 * How a refusal names the key and what it was first used with, in the words of the transport it is answered on: a
 * request's header and its request, or an operation's key and its input.
 */
export interface KeyTerms {
  /** The key, e.g. `Idempotency-Key` (the header's name), or `key of operation "payout"`. */
  key: string;
  /** What a key is first used with, e.g. `request (method, path, query or body)`, or `input`. */
  usedWith: string;
}

export class IdempotencyKeyReuseError extends IdempotencyError {
  constructor(terms: KeyTerms) {
    super(
      'idempotency_key_reuse',
      `This ${terms.key} was already used with a different ${terms.usedWith}. Use a new key for a new operation.`,
    );
  }
}

export class IdempotencyRequestInProgressError extends IdempotencyError {
  constructor(retryAfterSeconds: number, terms: KeyTerms) {
    super(
      'request_in_progress',
      `Another attempt with this ${terms.key} is still being processed. Retry after ${retryAfterSeconds} s to ` +
        'receive its outcome.',
      retryAfterSeconds,
    );
  }
}

export class IdempotencyStoreUnavailableError extends IdempotencyError {
  constructor(retryAfterSeconds: number) {
    super(
      'idempotency_store_unavailable',
      'The idempotency store could not be reached, so the request was not processed. Retry with the same key.',
      retryAfterSeconds,
    );
  }
}

export class IdempotencyShuttingDownError extends IdempotencyError {
  /** `abandoned`: the request had begun, and shutdown ended it before its handler finished. */
  constructor(retryAfterSeconds: number, abandoned = false) {
    super(
      'idempotency_shutting_down',
      abandoned
        ? 'This server shut down before this request finished, and released its key. Retry with the same key.'
        : 'This server is shutting down and takes no new idempotent requests. Retry with the same key.',
      retryAfterSeconds,
    );
  }
}

/**
 * The key's stored outcome cannot be read (it cannot be decrypted, see `encryption`): it is not replayed, and the work
 * is not run again either, which could do it twice. Not the client's fault, and retrying will not help until an
 * operator acts (the reason is in the server's log and the `recordUnreadable` event, never in the answer).
 */
export class IdempotencyRecordUnreadableError extends IdempotencyError {
  constructor() {
    super(
      'idempotency_record_unreadable',
      'The stored outcome of this idempotency key cannot be read by this server, so it is neither replayed nor run ' +
        'again. Retrying will not help until the server is fixed; do not retry with a new key unless running the ' +
        'operation twice is acceptable.',
    );
  }
}

/**
 * The call ran, but its outcome could not be stored as it was (the `redact` hook threw on it), and its work stands
 * (no transaction rolled it back): a stand-in is stored instead, so that the first answer and every retry's are this
 * refusal, and the work never runs again under the key. Not the client's fault; the fix is the server's.
 */
export class IdempotencyOutcomeWithheldError extends IdempotencyError {
  constructor() {
    super(
      'idempotency_outcome_withheld',
      'This request was processed, but this server could not store its outcome, so the outcome is withheld. ' +
        'Retrying with this key returns this answer and does not process the request again.',
    );
  }
}
