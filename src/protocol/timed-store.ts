import type { IdempotencyStore } from './idempotency-store.interface.js';
import type { IdempotencyTelemetry } from './idempotency-telemetry.js';

/**
 * The store as `IdempotencyService` calls it: each operation timed on `idempotency.store.operation.duration`, in one
 * place rather than in each store. What the service does not call per request (schema, health, close) passes as is.
 */
export function timedStore(store: IdempotencyStore, telemetry: IdempotencyTelemetry): IdempotencyStore {
  return {
    processLocal: store.processLocal,
    transactionsRefused: store.transactionsRefused,
    capacity: store.capacity,
    claim: (...args) => telemetry.timeStore('claim', () => store.claim(...args)),
    renew: (...args) => telemetry.timeStore('renew', () => store.renew(...args)),
    complete: (...args) => telemetry.timeStore('complete', () => store.complete(...args)),
    release: (...args) => telemetry.timeStore('release', () => store.release(...args)),
    ...(store.recordStep && {
      recordStep: (...args) => telemetry.timeStore('record_step', () => store.recordStep!(...args)),
    }),
    markAwaited: (...args) => telemetry.timeStore('mark_awaited', () => store.markAwaited(...args)),
    waitForChange: (...args) => store.waitForChange(...args),
    beginTransaction: (...args) => telemetry.timeStore('begin_transaction', () => store.beginTransaction(...args)),
    beginHoldingTransaction: (...args) =>
      telemetry.timeStore('begin_holding_transaction', () => store.beginHoldingTransaction(...args)),
    purgeExpired: (...args) => telemetry.timeStore('purge', () => store.purgeExpired(...args)),
    checkSchema: store.checkSchema?.bind(store),
    checkHealth: store.checkHealth?.bind(store),
    close: store.close?.bind(store),
  };
}
