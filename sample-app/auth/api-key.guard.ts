import { type CanActivate, type ExecutionContext, HttpStatus, Injectable, SetMetadata } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { IncomingHttpHeaders } from 'node:http';
import { ApiError } from '../api-errors.js';

export const API_KEY = /^sk_test_[A-Za-z0-9_]{1,64}$/;
const PUBLIC_ROUTE = 'sample:public';

/** Marks a route that needs no API key. */
export const Public = () => SetMetadata(PUBLIC_ROUTE, true);

/** The request of either platform (Express's request, Fastify's `FastifyRequest`): both have Node's headers. */
export interface AuthenticatedRequest {
  headers: IncomingHttpHeaders;
  /** The account of the request: its API key. */
  account: string;
}

/**
 * `Authorization: Bearer <key>` or `X-API-Key: <key>` (Authorization wins when both are sent); every
 * well-formed test key is its own account. Runs before interceptors, so a 401 never touches idempotency.
 */
@Injectable()
export class ApiKeyGuard implements CanActivate {
  constructor(private readonly reflector: Reflector) {}

  canActivate(context: ExecutionContext): boolean {
    // A message is authenticated by the broker (its connection's credentials); its account is in its payload.
    if (context.getType() === 'rpc') return true;
    if (this.reflector.getAllAndOverride<boolean>(PUBLIC_ROUTE, [context.getHandler(), context.getClass()]))
      return true;
    const request = requestOf(context);
    const key = apiKeyOf(request);
    if (!key || !API_KEY.test(key)) {
      throw new ApiError(
        HttpStatus.UNAUTHORIZED,
        'authentication_error',
        'api_key_invalid',
        'Send a valid API key as "Authorization: Bearer sk_test_..." or "X-API-Key: sk_test_...".',
      );
    }
    request.account = key;
    return true;
  }
}

/** The HTTP request of a call: a route's, or a GraphQL operation's (its context's `req`, set in app.module.ts). */
export function requestOf(context: ExecutionContext): AuthenticatedRequest {
  if (context.getType<string>() === 'graphql') return context.getArgByIndex<{ req: AuthenticatedRequest }>(2).req;
  return context.switchToHttp().getRequest<AuthenticatedRequest>();
}

function apiKeyOf(request: AuthenticatedRequest): string | undefined {
  const authorization = request.headers.authorization;
  if (authorization !== undefined) return /^Bearer (\S+)$/i.exec(authorization)?.[1];
  const apiKey = request.headers['x-api-key'];
  return typeof apiKey === 'string' ? apiKey : undefined;
}
