export { IdempotencyModule } from './idempotency.module.js';
export { IDEMPOTENCY_MODULE_OPTIONS, type IdempotencyModuleExtras } from './idempotency.module-definition.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyInterceptor } from './idempotency.interceptor.js';
export {
  type AttemptOutcome,
  type ExecuteResult,
  type IdempotencyDecision,
  type IdempotentOperation,
  IdempotencyService,
} from './idempotency.service.js';
export type { Jsonified, JsonResult } from './jsonified.js';
export { IdempotencyContext } from './idempotency-context.js';
export { IdempotencyRun } from './idempotency-run.js';
export { IDEMPOTENCY_STORE } from './idempotency.constants.js';
export { TransactionEscapeError } from './transaction-escape.subscriber.js';
export type {
  AccountResolver,
  FingerprintInput,
  IdempotencyModuleOptions,
  IdempotentOptions,
} from './idempotency-options.interface.js';
export { isFinalStatusByDefault, resolvePolicy, sha256Fingerprint, type IdempotencyPolicy } from './idempotency-policy.js';
export { parseIdempotencyKey } from './idempotency-key.js';
export type {
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreTransaction,
} from './idempotency-store.interface.js';
export { PostgresIdempotencyStore } from './postgres-idempotency.store.js';
export { IdempotencyRecord } from './idempotency-record.entity.js';
export { IdempotencyMigrations, idempotencyMigrations } from './migrations/idempotency-migrations.js';
export { IdempotencySetupError } from './idempotency-setup.error.js';
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
} from './idempotency.errors.js';
