import { metrics } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { IdempotencyTelemetry } from '../../src/protocol/idempotency-telemetry.js';

// Store calls are timed, and outcomes counted, only where an SDK registered a meter provider before the module
// started: without one, they would cost every request for instruments that record nothing.

afterEach(() => metrics.disable());

it('measures nothing (store calls, outcomes) when no meter provider is registered', () => {
  expect(new IdempotencyTelemetry().metered).toBe(false);
});

it('measures once a meter provider is registered', () => {
  metrics.setGlobalMeterProvider(new MeterProvider());
  expect(new IdempotencyTelemetry().metered).toBe(true);
});
