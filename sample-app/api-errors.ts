import { HttpException, HttpStatus } from '@nestjs/common';

/** The sample API's own errors: `{ error: { type, code, message, param? } }`, as Stripe shapes them. */
export class ApiError extends HttpException {
  constructor(status: HttpStatus, type: string, code: string, message: string, param?: string) {
    super({ error: { type, code, message, ...(param ? { param } : {}) } }, status);
    // What GraphQL's error and the logs show; the REST body is the response above.
    this.message = message;
  }
}

export function invalidRequest(message: string, param?: string): ApiError {
  return new ApiError(
    HttpStatus.BAD_REQUEST,
    'invalid_request_error',
    param ? 'parameter_invalid' : 'invalid_request',
    message,
    param,
  );
}
