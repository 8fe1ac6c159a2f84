import {
  type Attributes,
  type Counter,
  createNoopMeter,
  type Histogram,
  metrics,
  type Span,
  SpanStatusCode,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import type { IdempotencyRun } from './idempotency-run.js';
import {
  IdempotencyKeyReuseError,
  IdempotencyOutcomeWithheldError,
  IdempotencyRecordUnreadableError,
  IdempotencyShuttingDownError,
  IdempotencyStoreUnavailableError,
  IdempotencyRequestInProgressError,
} from './idempotency.errors.js';
import type { IdempotencyClaim } from './idempotency-store.interface.js';

/** What the claim of a call decided, what it counts as on `idempotency.outcomes`, and the run it started, if any. */
export interface MeasuredClaim<T> {
  decision: T;
  outcome: IdempotencyOutcome;
  run?: IdempotencyRun;
}

/** A run's span and its start, until its finalize. */
interface RunTiming {
  span: Span;
  started: number;
  attributes: Attributes;
}

/** The name of the module's meter and tracer. */
export const IDEMPOTENCY_INSTRUMENTATION_NAME = 'nest-idempotency';

/**
 * Bucket boundaries of the durations, in seconds: those OpenTelemetry's semantic conventions recommend for
 * request durations (the SDK's default ones
 * are for milliseconds, and would put every store call in the first bucket).
 */
const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** The values of `idempotency.outcome` on the `idempotency.outcomes` counter (see docs/observability.md). */
export type IdempotencyOutcome =
  | 'new'
  | 'replay.memory'
  | 'replay.store'
  | 'key_reuse'
  | 'in_progress'
  | 'waited'
  | 'takeover'
  | 'stored'
  | 'released'
  | 'finalize.retried'
  | 'finalize.gave_up'
  | 'store_unavailable'
  | 'shutting_down'
  | 'record_unreadable'
  | 'outcome_withheld';

/** The store operations timed by `idempotency.store.operation.duration`. */
export type StoreOperationName =
  | 'claim'
  | 'complete'
  | 'release'
  | 'record_step'
  | 'renew'
  | 'mark_awaited'
  | 'begin_transaction'
  | 'begin_holding_transaction'
  | 'purge';

/** The spans the module opens, children of the span active when the call reached it. */
export type IdempotencySpanName = 'idempotency claim' | 'idempotency run' | 'idempotency finalize';

/**
 * The module's metrics and spans, through `@opentelemetry/api` only: no-ops unless the application registered an SDK.
 * Instruments are acquired when it is constructed (with `IdempotencyService`), since the API does not proxy meters
 * registered later. No attribute carries a key, an account or a body: only the transport and the scope's endpoint.
 */
export class IdempotencyTelemetry {
  private readonly tracer: Tracer;
  private readonly outcomes: Counter;
  private readonly storeDuration: Histogram;
  private readonly handlerDuration: Histogram;
  /** The transport each claim was made for: its finalize, in the background too, is counted under it. */
  private readonly claimAttributes = new WeakMap<IdempotencyClaim, Attributes>();
  private readonly runs = new WeakMap<IdempotencyRun, RunTiming>();
  /**
   * Whether a meter provider was registered before the module started: without one, nothing is measured, store calls
   * are not timed and outcomes not counted (timing them, and building each count's attributes, for instruments that
   * record nothing cost microseconds a request). Spans are another matter: a tracer provider registered later is used.
   */
  readonly metered: boolean;

  constructor() {
    const meter = metrics.getMeter(IDEMPOTENCY_INSTRUMENTATION_NAME);
    this.metered = Object.getPrototypeOf(meter) !== Object.getPrototypeOf(createNoopMeter());
    this.tracer = trace.getTracer(IDEMPOTENCY_INSTRUMENTATION_NAME);
    this.outcomes = meter.createCounter('idempotency.outcomes', {
      unit: '{outcome}',
      description: 'Outcomes of idempotent calls and of their claims, by idempotency.outcome.',
    });
    this.storeDuration = meter.createHistogram('idempotency.store.operation.duration', {
      unit: 's',
      description: 'Duration of the idempotency store operations.',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
    this.handlerDuration = meter.createHistogram('idempotency.handler.duration', {
      unit: 's',
      description: 'Duration of idempotent handlers run under their claim, from the claim to the finalize.',
      advice: { explicitBucketBoundaries: SECONDS_BUCKETS },
    });
  }

  /**
   * Measures the claim of a call: its `idempotency claim` span, its outcome or refusal counted, and the run it started
   * (`idempotency run`, timed until its finalize). The call's metrics, and its claim's later ones (a finalize in the
   * background too), carry its transport and its endpoint's label.
   */
  async measureClaim<T>(
    claim: IdempotencyClaim,
    call: { transport: string; endpoint: string },
    decide: (attributes: Attributes) => Promise<MeasuredClaim<T>>,
  ): Promise<T> {
    const attributes = callAttributes(call.transport, call.endpoint);
    this.claimAttributes.set(claim, attributes);
    const measured = await this.inSpan('idempotency claim', attributes, async (span) => {
      try {
        const decided = await decide(attributes);
        span.setAttribute('idempotency.outcome', decided.outcome);
        this.count(decided.outcome, attributes);
        return decided;
      } catch (error) {
        const refused = refusalOutcome(error);
        if (refused) this.count(refused, attributes);
        throw error;
      }
    });
    // Started outside the claim's span: the run is its sibling, under the call's span.
    if (measured.run) this.runStarted(measured.run, attributes);
    return measured.decision;
  }

  /** The attributes of a claim's metrics and spans. */
  attributesOf(claim: IdempotencyClaim): Attributes {
    return this.claimAttributes.get(claim) ?? callAttributes('operation', claim.scope.endpoint);
  }

  count(outcome: IdempotencyOutcome, attributes: Attributes): void {
    if (this.metered) this.outcomes.add(1, withOutcome(attributes, outcome));
  }

  /** Times a store operation, with its `error.type` when it failed. */
  async timeStore<T>(operation: StoreOperationName, call: () => Promise<T>): Promise<T> {
    const started = performance.now();
    const attributes: Attributes = { 'idempotency.store.operation': operation };
    try {
      return await call();
    } catch (error) {
      attributes['error.type'] = errorType(error);
      throw error;
    } finally {
      this.storeDuration.record((performance.now() - started) / 1000, attributes);
    }
  }

  /** Opens the `idempotency run` span of a claimed run, under the active span, and starts timing its handler. */
  private runStarted(run: IdempotencyRun, attributes: Attributes): void {
    const span = this.tracer.startSpan('idempotency run', { attributes });
    this.runs.set(run, { span, started: performance.now(), attributes });
  }

  /**
   * Ends the run's span and records its handler's duration, as its finalize begins; returns the run's attributes.
   * A run given back before its handler ran (shutdown began meanwhile) has neither.
   */
  runEnded(run: IdempotencyRun): Attributes {
    const timing = this.runs.get(run);
    if (!timing) return this.attributesOf(run.claim);
    this.runs.delete(run);
    timing.span.end();
    this.handlerDuration.record((performance.now() - timing.started) / 1000, timing.attributes);
    return timing.attributes;
  }

  /** Runs `work` in a span of its own, ended when it settles; a rejection is recorded on it. */
  async inSpan<T>(name: IdempotencySpanName, attributes: Attributes, work: (span: Span) => Promise<T>): Promise<T> {
    return this.tracer.startActiveSpan(name, { attributes }, async (span) => {
      try {
        return await work(span);
      } catch (error) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: errorType(error) });
        span.setAttribute('error.type', errorType(error));
        throw error;
      } finally {
        span.end();
      }
    });
  }
}

/**
 * A scope's attributes and an outcome, written out: V8 copies an object spread with these dotted names on a slow
 * path (microseconds a count, measured), which would cost every request even with no SDK.
 */
function withOutcome(attributes: Attributes, outcome: IdempotencyOutcome): Attributes {
  return {
    'idempotency.transport': attributes['idempotency.transport'],
    'idempotency.endpoint': attributes['idempotency.endpoint'],
    'idempotency.outcome': outcome,
  };
}

/**
 * The attributes of a call: its transport and its endpoint as its transport names it for metrics (a route template, a
 * broker pattern and consumer, a mutation's field, an operation's name), never its key, its account, nor any text its
 * client chose.
 */
function callAttributes(transport: string, endpoint: string): Attributes {
  return { 'idempotency.transport': transport, 'idempotency.endpoint': endpoint };
}

/** OpenTelemetry's `error.type`: the error's class name (never its message, which may quote a key). */
function errorType(error: unknown): string {
  return error instanceof Error ? error.constructor.name : '_OTHER';
}

/** What a refusal counts as on `idempotency.outcomes`; `undefined` for an error that is not one of the protocol's. */
export function refusalOutcome(error: unknown): IdempotencyOutcome | undefined {
  if (error instanceof IdempotencyKeyReuseError) return 'key_reuse';
  if (error instanceof IdempotencyRequestInProgressError) return 'in_progress';
  if (error instanceof IdempotencyShuttingDownError) return 'shutting_down';
  if (error instanceof IdempotencyStoreUnavailableError) return 'store_unavailable';
  if (error instanceof IdempotencyRecordUnreadableError) return 'record_unreadable';
  if (error instanceof IdempotencyOutcomeWithheldError) return 'outcome_withheld';
  return undefined;
}
