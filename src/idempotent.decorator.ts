import { SetMetadata } from '@nestjs/common';
import { IDEMPOTENT_METADATA } from './protocol/idempotency.tokens.js';
import type { IdempotentOptions } from './idempotency-options.js';
import { resolvePolicy } from './protocol/idempotency-policy.js';

/**
 * Makes a route (or every route of a controller) safe to retry: requests carrying the same
 * Idempotency-Key run the handler once and replay its stored outcome. GET, HEAD, OPTIONS and DELETE
 * pass through. Options given here override the module's; a method's override its controller's.
 */
export const Idempotent = (options: IdempotentOptions = {}): ClassDecorator & MethodDecorator => {
  // The protocol's options fail where they are written; each transport checks its own at start-up, on its handlers
  // only (HTTP's on routes, never on a consumer or a resolver).
  resolvePolicy({}, options);
  return SetMetadata(IDEMPOTENT_METADATA, options);
};
