import { type ExecutionContext, HttpException } from '@nestjs/common';
import { describedValue } from '../protocol/described-value.js';
import { IdempotencyAccountUnresolvedError } from '../protocol/idempotency.errors.js';
import type { IdempotencyPolicy } from '../protocol/idempotency-policy.js';
import { scopeTextFault } from '../protocol/scope-values.js';
import type { HttpRequest } from './http-platform.js';
import { endpointOf } from './idempotency-http.js';
import type { OnceLog } from './once-log.js';

/**
 * The account a request belongs to. A resolver that fails, or gives no account, is the application's mistake (a
 * public route under a resolver that reads what a guard sets): answered 500 before anything is claimed, and
 * logged once per route with the reason. An `HttpException` it throws (a 401, say) is its answer, and passes.
 */
export async function accountOf(
  context: ExecutionContext,
  request: HttpRequest,
  policy: IdempotencyPolicy,
  log: OnceLog,
): Promise<string> {
  if (!policy.accountResolver) return '';
  let account: unknown;
  try {
    account = await policy.accountResolver(context);
  } catch (error) {
    if (error instanceof HttpException) throw error;
    throw accountUnresolved(context, request, log, `it threw ${error}`);
  }
  if (typeof account !== 'string' && !(typeof account === 'number' && Number.isFinite(account))) {
    throw accountUnresolved(context, request, log, `it returned ${describedValue(account)}`);
  }
  const fault = scopeTextFault(String(account));
  if (fault !== undefined) {
    throw accountUnresolved(context, request, log, `it returned ${describedValue(account)} (${fault})`);
  }
  return String(account);
}

function accountUnresolved(
  context: ExecutionContext,
  request: HttpRequest,
  log: OnceLog,
  reason: string,
): IdempotencyAccountUnresolvedError {
  const endpoint = endpointOf(request);
  log.error(
    `account ${endpoint}`,
    `The accountResolver gave no account for ${context.getClass().name}.${context.getHandler().name} (${endpoint}): ` +
      `${reason}. Its requests are answered 500 idempotency_account_unresolved and do not run. The resolver runs ` +
      'after guards: a route without the guard it relies on (a public route) needs a resolver of its own, ' +
      '`@Idempotent({ accountResolver })`.',
  );
  return new IdempotencyAccountUnresolvedError();
}
