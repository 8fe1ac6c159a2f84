// `nest-idempotency/store`: what a store of your own implements (see docs/custom-store.md), and the injection token
// under which the module finds the store. `nest-idempotency/testing` holds the contract kit that checks one.
export { IDEMPOTENCY_STORE } from '../protocol/idempotency.tokens.js';
export type {
  AbandonedQuery,
  AbandonedRecord,
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoredStep,
  StoreHealth,
  StoreHealthCheck,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';
