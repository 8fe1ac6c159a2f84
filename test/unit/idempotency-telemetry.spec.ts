import { metrics } from '@opentelemetry/api';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { IdempotencyTelemetry } from '../../src/protocol/idempotency-telemetry.js';

// Store calls are timed only where an SDK registered a meter provider before the module started: without one, the
// timing would cost every request for a histogram that records nothing.

afterEach(() => metrics.disable());

it('does not time store calls when no meter provider is registered', () => {
  expect(new IdempotencyTelemetry().measuresStore).toBe(false);
});

it('times store calls once a meter provider is registered', () => {
  metrics.setGlobalMeterProvider(new MeterProvider());
  expect(new IdempotencyTelemetry().measuresStore).toBe(true);
});
