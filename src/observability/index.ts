// `nest-idempotency/observability`: the events an application may subscribe to on `node:diagnostics_channel`, and
// the names of the module's OpenTelemetry meter, metrics' values and spans (see docs/observability.md).
export {
  IDEMPOTENCY_CHANNELS,
  type CompletionEvent,
  type FinalizeGaveUpEvent,
  type IdempotencyEventPayloads,
  type LockLostEvent,
  type RecordUnreadableEvent,
  type StoreUnavailableEvent,
  type TakeoverEvent,
} from '../protocol/idempotency-events.js';
export {
  IDEMPOTENCY_INSTRUMENTATION_NAME,
  type IdempotencyOutcome,
  type IdempotencySpanName,
  type StoreOperationName,
} from '../protocol/idempotency-telemetry.js';
