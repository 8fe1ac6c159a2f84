import type { ExecutionContext } from '@nestjs/common';
import { requestOf } from './api-key.guard.js';

/**
 * The account a call is for (the idempotency module's `accountResolver`): the API key's, for an HTTP request (set by
 * `ApiKeyGuard`), or a GraphQL operation's; the payload's `account`, for a message (its handler's pipe checks it is an API key).
 */
export function accountOf(context: ExecutionContext): string {
  if (context.getType() === 'rpc') {
    // Whatever it is: the module refuses an account that is not a string, and rejects (dead-letters) its message.
    return context.switchToRpc().getData<{ account?: unknown } | null>()?.account as string;
  }
  return requestOf(context).account;
}
