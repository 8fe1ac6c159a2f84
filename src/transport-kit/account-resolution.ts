import type { ExecutionContext } from '@nestjs/common';
import { describedValue } from '../protocol/described-value.js';
import type { IdempotencyPolicy } from '../protocol/idempotency-policy.js';
import { scopeTextFault } from '../protocol/scope-values.js';

/** How a transport treats what an `accountResolver` does wrong. */
export interface AccountResolution {
  /** An error the resolver threw that is its answer to the caller (an `HttpException`, say), thrown on as it is. */
  isAnswer(error: unknown): boolean;
  /** The error to throw when the resolver failed or gave no account; `reason` says how. */
  unresolved(reason: string): Error;
}

/**
 * The account a call belongs to, by the policy's `accountResolver` (`''` without one): a string, or a finite number
 * as its string, that a scope can hold. Anything else is the application's mistake, thrown as `unresolved` says.
 */
export async function resolveAccount(
  context: ExecutionContext,
  policy: IdempotencyPolicy,
  resolution: AccountResolution,
): Promise<string> {
  if (!policy.accountResolver) return '';
  let account: unknown;
  try {
    account = await policy.accountResolver(context);
  } catch (error) {
    if (resolution.isAnswer(error)) throw error;
    throw resolution.unresolved(`it threw ${error}`);
  }
  if (typeof account !== 'string' && !(typeof account === 'number' && Number.isFinite(account))) {
    throw resolution.unresolved(`it returned ${describedValue(account)}`);
  }
  const fault = scopeTextFault(String(account));
  if (fault !== undefined) throw resolution.unresolved(`it returned ${describedValue(account)} (${fault})`);
  return String(account);
}
