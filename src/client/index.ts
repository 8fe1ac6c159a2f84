// The client half: runs in browsers and in Node (no Nest, TypeORM or Node-only imports).
export { canonicalJson } from '../shared/canonical-json.js';
export { createIdempotencyKey, deriveIdempotencyKey } from './idempotency-keys.js';
export { backoffMs, retryAfterMs, type RetryOptions, withRetries } from './with-retries.js';
export {
  createIdempotentClient,
  type IdempotentClientOptions,
  idempotentFetch,
  type IdempotentRequestInit,
  type IdempotentResult,
} from './idempotent-client.js';
