import { HttpException, HttpStatus } from '@nestjs/common';

/**
 * An error the module answers with: JSON `{ statusCode, error, message }` where `error` is a stable
 * machine-readable code. `retryAfterSeconds`, when set, is sent as `Retry-After`.
 */
export class IdempotencyError extends HttpException {
  constructor(
    readonly code: string,
    message: string,
    status: HttpStatus,
    readonly retryAfterSeconds?: number,
  ) {
    super({ statusCode: status, error: code, message }, status);
  }
}

export class IdempotencyKeyRequiredError extends IdempotencyError {
  constructor(headerName: string) {
    super(
      'idempotency_key_required',
      `This endpoint requires an ${headerName} header: send a unique key per operation and reuse it on every retry.`,
      HttpStatus.BAD_REQUEST,
    );
  }
}

export class IdempotencyKeyInvalidError extends IdempotencyError {
  constructor(headerName: string, reason: string) {
    super('idempotency_key_invalid', `The ${headerName} header is invalid: ${reason}.`, HttpStatus.BAD_REQUEST);
  }
}

export class IdempotencyBodyUnavailableError extends IdempotencyError {
  constructor() {
    super(
      'idempotency_body_unsupported',
      'The body of this request could not be read for its fingerprint: send it as JSON or as form data ' +
        '(servers: create the Nest application with `rawBody: true`).',
      HttpStatus.UNSUPPORTED_MEDIA_TYPE,
    );
  }
}

export class IdempotencyKeyReuseError extends IdempotencyError {
  constructor() {
    super(
      'idempotency_key_reuse',
      'This Idempotency-Key was already used with a different request (method, path, query or body). ' +
        'Use a new key for a new operation.',
      HttpStatus.UNPROCESSABLE_ENTITY,
    );
  }
}

export class RequestInProgressError extends IdempotencyError {
  constructor(retryAfterSeconds: number) {
    super(
      'request_in_progress',
      'Another request with this Idempotency-Key is still being processed. Retry after the delay in Retry-After ' +
        'to receive its outcome.',
      HttpStatus.CONFLICT,
      retryAfterSeconds,
    );
  }
}

export class IdempotencyStoreUnavailableError extends IdempotencyError {
  constructor(retryAfterSeconds: number) {
    super(
      'idempotency_store_unavailable',
      'The idempotency store could not be reached, so the request was not processed. Retry with the same key.',
      HttpStatus.SERVICE_UNAVAILABLE,
      retryAfterSeconds,
    );
  }
}

export class IdempotencyShuttingDownError extends IdempotencyError {
  constructor(retryAfterSeconds: number) {
    super(
      'idempotency_shutting_down',
      'This server is shutting down and takes no new idempotent requests. Retry with the same key.',
      HttpStatus.SERVICE_UNAVAILABLE,
      retryAfterSeconds,
    );
  }
}
