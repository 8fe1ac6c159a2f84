// The public API of `nest-idempotency`, by role. Anything not exported here is internal and may change in any release.

// The module, the route decorator, and what handlers and services see of their run.
export { IdempotencyModule } from './idempotency.module.js';
export type { IdempotencyModuleExtras, IdempotencyStoreChoice } from './idempotency.module-definition.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyContext } from './protocol/idempotency-context.js';
export { IdempotencyRun } from './protocol/idempotency-run.js';

// Options, and the defaults an application may build its own from.
export type { IdempotencyModuleOptions, IdempotentOptions } from './idempotency-options.js';
export type {
  AccountResolver,
  OutcomeEncryptionOptions,
  OutcomeRedaction,
  ProtocolIdempotentOptions,
  ProtocolModuleOptions,
} from './protocol/idempotency-options.interface.js';
export type {
  FingerprintInput,
  HttpIdempotencyModuleOptions,
  HttpIdempotentOptions,
} from './http/http-options.interface.js';
export { HTTP_PROFILES, type HttpProfileName } from './http/answers/http-profile.js';
export { isFinalStatusByDefault } from './transport-kit/final-statuses.js';
export { sha256Fingerprint } from './http/requests/http-policy.js';
export { jsonFieldsFingerprint, type JsonFieldsSelection } from './http/requests/json-fields-fingerprint.js';

// Operations that are not HTTP requests (queue consumers, jobs), and the purge on demand.
export { IdempotencyService } from './protocol/idempotency.service.js';
export type { ExecuteResult, IdempotentOperation } from './protocol/idempotent-operations.js';
export type { Jsonified, JsonResult } from './protocol/jsonified.js';

// Errors: the answers of the module (each with a stable `code`), and the refusals at start-up.
export {
  IdempotencyAccountUnresolvedError,
  IdempotencyBodyUnavailableError,
  IdempotencyError,
  type IdempotencyErrorCode,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
  IdempotencyKeyReuseError,
  IdempotencyMisconfiguredError,
  IdempotencyOperationInvalidError,
  IdempotencyOutcomeWithheldError,
  IdempotencyRecordUnreadableError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  RequestInProgressError,
} from './protocol/idempotency.errors.js';
export { IdempotencySetupError } from './protocol/idempotency-setup.error.js';

// The record store: its injection tokens and interface (for a store of your own), and the in-memory one (for tests and
// single-process tools). The PostgreSQL store is `nest-idempotency/postgres`.
export { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './protocol/idempotency.tokens.js';
export type {
  ClaimResult,
  ClaimTiming,
  ExistingRecord,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoreHealth,
  StoreHealthCheck,
  StoreTransaction,
} from './protocol/idempotency-store.interface.js';
export {
  InMemoryIdempotencyStore,
  type InMemoryIdempotencyStoreOptions,
} from './memory/in-memory-idempotency.store.js';

// Observability: the events an application may subscribe to on `node:diagnostics_channel`, and the names of the
// module's OpenTelemetry metrics and spans (see docs/observability.md).
export {
  IDEMPOTENCY_CHANNELS,
  type FinalizeGaveUpEvent,
  type IdempotencyEventPayloads,
  type LockLostEvent,
  type RecordUnreadableEvent,
  type StoreUnavailableEvent,
  type TakeoverEvent,
} from './protocol/idempotency-events.js';
export {
  IDEMPOTENCY_INSTRUMENTATION_NAME,
  type IdempotencyOutcome,
  type IdempotencySpanName,
  type StoreOperationName,
} from './protocol/idempotency-telemetry.js';
