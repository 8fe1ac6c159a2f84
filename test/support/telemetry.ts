import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type Attributes, context, metrics, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { type DataPoint, type Histogram, MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { IDEMPOTENCY_CHANNELS, type IdempotencyEventPayloads } from '../../src/observability/index.js';

/** A reader the test collects from when it looks, rather than on a period. */
class CollectingReader extends MetricReader {
  protected async onForceFlush(): Promise<void> {}
  protected async onShutdown(): Promise<void> {}
}

/** A metric's data points, of a counter (`number`) or a histogram. */
export type Points = Array<DataPoint<number | Histogram>>;

/**
 * The OpenTelemetry SDK as an application registers it (before its Nest app is created), exporting into memory:
 * metrics collected on demand, finished spans kept. `stop()` disables the global API again.
 */
export class InMemoryTelemetry {
  private readonly reader = new CollectingReader();
  private readonly spans = new InMemorySpanExporter();
  private readonly contextManager = new AsyncLocalStorageContextManager().enable();

  constructor() {
    context.setGlobalContextManager(this.contextManager);
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [this.reader] }));
    trace.setGlobalTracerProvider(
      new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter: this.spans })] }),
    );
  }

  /** The data points of metric `name` now (cumulative), each with its attributes. */
  async points(name: string): Promise<Points> {
    const { resourceMetrics } = await this.reader.collect();
    return resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .filter((metric) => metric.descriptor.name === name)
      .flatMap((metric) => metric.dataPoints as Points);
  }

  /** The sum of the counter `name`'s points whose attributes include `attributes`. */
  async count(name: string, attributes: Attributes): Promise<number> {
    return (await this.points(name))
      .filter((point) => matches(point.attributes, attributes))
      .reduce((sum, point) => sum + (point.value as number), 0);
  }

  /** Every metric's data points (for checks over all attributes). */
  async allPoints(): Promise<Points> {
    const { resourceMetrics } = await this.reader.collect();
    return resourceMetrics.scopeMetrics.flatMap((scope) =>
      scope.metrics.flatMap((metric) => metric.dataPoints as Points),
    );
  }

  finishedSpans(): ReadableSpan[] {
    return this.spans.getFinishedSpans();
  }

  async stop(): Promise<void> {
    metrics.disable();
    trace.disable();
    context.disable();
  }
}

export function matches(actual: Attributes, expected: Attributes): boolean {
  return Object.entries(expected).every(([name, value]) => actual[name] === value);
}

/** The events published on the module's channels while it records, by event. */
export class RecordedEvents {
  readonly events: { [E in keyof IdempotencyEventPayloads]: Array<IdempotencyEventPayloads[E]> } = {
    lockLost: [],
    takeover: [],
    finalizeGaveUp: [],
    recordUnreadable: [],
    storeUnavailable: [],
    completion: [],
  };
  private readonly listeners = Object.keys(this.events).map((event) => {
    const name = IDEMPOTENCY_CHANNELS[event as keyof IdempotencyEventPayloads];
    const listener = (payload: unknown) =>
      (this.events[event as keyof IdempotencyEventPayloads] as unknown[]).push(payload);
    subscribe(name, listener);
    return { name, listener };
  });

  stop(): void {
    for (const { name, listener } of this.listeners) unsubscribe(name, listener);
  }
}
