import { type CanActivate, type ExecutionContext, HttpStatus, Inject, Injectable } from '@nestjs/common';
import { timingSafeEqual } from 'node:crypto';
import { ApiError } from '../api-errors.js';
import type { AuthenticatedRequest } from '../auth/api-key.guard.js';
import { SAMPLE_CONFIG, type SampleConfig } from '../sample-config.js';

/**
 * The operator's routes answer only `X-Operator-Token: <OPERATOR_TOKEN>`: an API key (a charge client's) opens
 * nothing here, and without `OPERATOR_TOKEN` the routes are off (404), so that a deployment never exposes them by default.
 */
@Injectable()
export class OperatorTokenGuard implements CanActivate {
  constructor(@Inject(SAMPLE_CONFIG) private readonly config: SampleConfig) {}

  canActivate(context: ExecutionContext): boolean {
    const expected = this.config.operatorToken;
    if (expected === undefined) {
      throw new ApiError(
        HttpStatus.NOT_FOUND,
        'invalid_request_error',
        'operator_view_off',
        'Set OPERATOR_TOKEN to open the operator view.',
      );
    }
    const sent = context.switchToHttp().getRequest<AuthenticatedRequest>().headers['x-operator-token'];
    if (typeof sent !== 'string' || !sameSecret(sent, expected)) {
      throw new ApiError(
        HttpStatus.UNAUTHORIZED,
        'authentication_error',
        'operator_token_invalid',
        'Send the operator token as "X-Operator-Token: <OPERATOR_TOKEN>".',
      );
    }
    return true;
  }
}

/** Compared in constant time: the token is a secret. */
function sameSecret(sent: string, expected: string): boolean {
  const [a, b] = [Buffer.from(sent), Buffer.from(expected)];
  return a.length === b.length && timingSafeEqual(a, b);
}
