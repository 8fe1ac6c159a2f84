import { type CanActivate, type ExecutionContext, Injectable, UnauthorizedException } from '@nestjs/common';
import type { Request } from 'express';

/** The request as this app's guard leaves it: the account it authenticated. */
export interface AccountRequest extends Request {
  account: string;
}

const ACCOUNT = /^acct_[A-Za-z0-9_]{1,64}$/;

/**
 * The app's stand-in for authentication: `X-Account: acct_…` names the caller's account. The idempotency
 * module's `accountResolver` reads what this guard set (guards run before interceptors).
 */
@Injectable()
export class AccountGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<AccountRequest>();
    const account = request.header('x-account');
    if (!account || !ACCOUNT.test(account)) {
      throw new UnauthorizedException('Send X-Account: acct_…');
    }
    request.account = account;
    return true;
  }
}
