export { IdempotencyModule } from './idempotency.module.js';
export type { IdempotencyModuleExtras } from './idempotency.module-definition.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyInterceptor } from './http/idempotency.interceptor.js';
export {
  type AttemptOutcome,
  type ExecuteResult,
  type IdempotencyDecision,
  type IdempotentOperation,
  IdempotencyService,
} from './protocol/idempotency.service.js';
export type { Jsonified, JsonResult } from './protocol/jsonified.js';
export { IdempotencyContext } from './idempotency-context.js';
export { IdempotencyRun } from './protocol/idempotency-run.js';
export { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
export { TransactionEscapeError } from './postgres/transaction-escape.subscriber.js';
export type {
  AccountResolver,
  FingerprintInput,
  IdempotencyModuleOptions,
  IdempotentOptions,
} from './protocol/idempotency-options.interface.js';
export {
  isFinalStatusByDefault,
  resolvePolicy,
  sha256Fingerprint,
  type IdempotencyPolicy,
} from './protocol/idempotency-policy.js';
export { parseIdempotencyKey } from './http/idempotency-key.js';
export type {
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from './protocol/idempotency-store.interface.js';
export { PostgresIdempotencyStore } from './postgres/postgres-idempotency.store.js';
export {
  InMemoryIdempotencyStore,
  type InMemoryIdempotencyStoreOptions,
} from './protocol/in-memory-idempotency.store.js';
export { IdempotencyRecord } from './postgres/idempotency-record.entity.js';
export { IdempotencyMigrations, idempotencyMigrations } from './postgres/migrations/idempotency-migrations.js';
export { IdempotencySetupError } from './protocol/idempotency-setup.error.js';
export {
  IdempotencyAccountUnresolvedError,
  IdempotencyBodyUnavailableError,
  IdempotencyError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyReuseError,
  IdempotencyMisconfiguredError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  RequestInProgressError,
} from './protocol/idempotency.errors.js';
