import { SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_METADATA } from './protocol/idempotency.tokens.js';
import { resolveHttpPolicy } from './http/requests/http-policy.js';
import type { IdempotentOptions } from './idempotency-options.js';
import { resolvePolicy } from './protocol/idempotency-policy.js';

/**
 * Makes a route (or every route of a controller) safe to retry: requests carrying the same
 * Idempotency-Key run the handler once and replay its stored outcome. GET, HEAD, OPTIONS and DELETE
 * pass through. Options given here override the module's; a method's override its controller's.
 */
export const Idempotent = (options: IdempotentOptions = {}): ClassDecorator & MethodDecorator => {
  // Invalid options fail where they are written, at start-up: each room checks its own.
  resolvePolicy({}, options);
  resolveHttpPolicy({}, options);
  return SetMetadata(IDEMPOTENT_METADATA, options);
};
