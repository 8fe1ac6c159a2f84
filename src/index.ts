// The public API of `nest-idempotency` that an application uses, by role. Each room's own types are in its entry
// point: `nest-idempotency/http` (the HTTP options and their helpers), `/store` (a store of your own),
// `/observability` (events and telemetry names), `/postgres`, `/testing`, and each transport's. Anything not exported
// from an entry point is internal and may change in any release.

// The module, the route decorator, and what handlers and services see of their run.
export { IdempotencyModule } from './idempotency.module.js';
export { Idempotent } from './idempotent.decorator.js';
export { IdempotencyContext } from './protocol/idempotency-context.js';
export { IdempotencyRun } from './protocol/idempotency-run.js';
export type { IdempotencyStep, StepOptions } from './protocol/idempotency-step.js';

// Options: the module's and a route's, and the hooks an application writes.
export type { IdempotencyModuleOptions, IdempotentOptions } from './idempotency-options.js';
export type {
  AccountResolver,
  CompleterOptions,
  OutcomeEncryptionOptions,
  OutcomeRedaction,
} from './protocol/idempotency-options.interface.js';
export { IDEMPOTENCY_MODULE_OPTIONS } from './protocol/idempotency.tokens.js';
// What the redact hook gets and returns.
export type { IdempotencyScope, StoredResponse } from './protocol/idempotency-store.interface.js';

// Operations that are not HTTP requests (queue consumers, jobs), and the purge on demand.
export { IdempotencyService } from './protocol/idempotency.service.js';
export type { ExecuteResult, IdempotentOperation } from './protocol/idempotent-operations.js';
export type { Jsonified, JsonResult } from './protocol/jsonified.js';

// The completer: abandoned operations finished by a worker of the application.
export {
  type AbandonedOperation,
  type CompletedOutcome,
  type CompletionPass,
  IdempotencyCompleter,
  type OperationCompletion,
} from './protocol/idempotency-completer.js';

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
  IdempotencyRequestInProgressError,
} from './protocol/idempotency.errors.js';
export { IdempotencySetupError } from './protocol/idempotency-setup.error.js';
export { IdempotencyStepError, type IdempotencyStepFault } from './protocol/idempotency-step.error.js';

// The in-memory store, for tests and single-process tools (the PostgreSQL store is `nest-idempotency/postgres`).
export {
  InMemoryIdempotencyStore,
  type InMemoryIdempotencyStoreOptions,
} from './memory/in-memory-idempotency.store.js';
