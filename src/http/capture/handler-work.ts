import { AsyncLocalStorage } from 'node:async_hooks';
import { Logger } from '@nestjs/common';
import { isObservable, Observable, Subject } from 'rxjs';
import { isWrapped, standInFor } from '../../transport-kit/handler-wrapper.js';

/** How the handler's own invocation ended: its value, its error, or its Observable was unsubscribed first. */
export type HandlerSettlement =
  { status: 'fulfilled'; value: unknown } | { status: 'rejected'; reason: unknown } | { status: 'cancelled' };

/** Thrown instead of running a handler whose request already has its outcome (its claim may be gone). */
export class HandlerInvokedAfterOutcomeError extends Error {
  constructor() {
    super('An idempotent handler was invoked after its request had been answered and its claim ended; it was not run.');
  }
}

/**
 * Where the current code runs: in the pipeline of a work (`pipeline`), and in the handler of a work (`handler`: the
 * handler's own code, and what it calls or leaves behind). One storage for both, not one each: every storage adds
 * its own step to every promise the process creates.
 */
interface WorkScope {
  pipeline: HandlerWork | undefined;
  handler: HandlerWork | undefined;
}
const workScope = new AsyncLocalStorage<WorkScope>();
const logger = new Logger('Idempotency');

/**
 * The real invocation of an idempotent route's handler, as the method itself sees it. Interceptors between the
 * module's and the handler (a timeout that errors the Observable, a retry that calls it again) change what the
 * module's interceptor sees, not what the handler does: the claim is held until this work has settled.
 */
export class HandlerWork {
  private running = 0;
  private closed = false;
  private replayed?: { value: unknown };
  private last?: HandlerSettlement;
  private idleWaiters: Array<() => void> = [];
  private readonly keptAlive = new Set<() => void>();

  /**
   * @param runsObservablesToCompletion An Observable handler keeps running when the pipeline unsubscribes from it
   *   (a timeout), as a promise would, until it completes or the pipeline completes without it: true for routes
   *   whose outcome is stored; false for streams (SSE), which a client that leaves must stop.
   */
  constructor(private readonly runsObservablesToCompletion: boolean) {}

  /** Runs `fn` (the handler's pipeline) so that invocations of tracked handlers inside it count as this work. */
  static within<T>(work: HandlerWork, fn: () => T): T {
    return workScope.run({ pipeline: work, handler: workScope.getStore()?.handler }, fn);
  }

  /**
   * Invokes a tracked handler: as this work's invocation when the pipeline calls it; plainly when there is no
   * work (the route was called without a key, or from code of the application's own).
   */
  static invoke(call: () => unknown): unknown {
    const work = workScope.getStore()?.pipeline;
    return work ? work.track(call) : call();
  }

  /** Whether an invocation of the handler is still running. */
  get busy(): boolean {
    return this.running > 0;
  }

  /** How the latest invocation ended; `undefined` when the handler was never invoked (a pipe or guard refused). */
  get settlement(): HandlerSettlement | undefined {
    return this.last;
  }

  /** Whether the code running now is this work's handler (it writes its own response, say), not the pipeline around it. */
  get isCurrentHandler(): boolean {
    return workScope.getStore()?.handler === this;
  }

  /**
   * The pipeline has completed (an interceptor took the value it needed, `take(1)`): Observable handlers kept
   * running after it unsubscribed are stopped, their last value their outcome.
   */
  pipelineCompleted(): void {
    for (const stop of [...this.keptAlive]) stop();
  }

  /** Resolves once no invocation is running. */
  idle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * From now on the pipeline's invocations of the handler answer `value` without running it: the pipeline is
   * run again to learn what the interceptors inside the module's make of a value they did not see.
   */
  replay(value: unknown): void {
    this.replayed = { value };
  }

  /** The outcome is decided: an invocation that starts later (a slow pipe outran by a timeout) must not run. */
  close(): void {
    this.closed = true;
  }

  private track(call: () => unknown): unknown {
    if (this.replayed && !this.closed) return this.replayed.value;
    if (this.closed) {
      // Nobody awaits this invocation any more (its request was answered), so the refusal is only seen here.
      const refusal = new HandlerInvokedAfterOutcomeError();
      logger.error(refusal.message);
      throw refusal;
    }
    let result: unknown;
    try {
      // Inside the handler there is no work: what it calls, now or in tasks it leaves behind, runs plainly.
      result = workScope.run({ pipeline: undefined, handler: this }, call);
    } catch (reason) {
      this.last = { status: 'rejected', reason };
      throw reason;
    }
    if (isObservable(result)) return this.trackObservable(result);
    if (isThenable(result)) {
      this.start();
      result.then(
        (value) => this.end({ status: 'fulfilled', value }),
        (reason: unknown) => this.end({ status: 'rejected', reason }),
      );
      return result;
    }
    this.last = { status: 'fulfilled', value: result };
    return result;
  }

  private trackObservable(source: Observable<unknown>): Observable<unknown> {
    return new Observable((subscriber) => {
      this.start();
      let value: unknown;
      let gaveValue = false;
      let ended = false;
      const end = (settlement: HandlerSettlement) => {
        if (ended) return;
        ended = true;
        this.keptAlive.delete(stop);
        this.end(settlement);
      };
      const stop = () => {
        subscription.unsubscribe();
        end(gaveValue ? { status: 'fulfilled', value } : { status: 'cancelled' });
      };
      // The source feeds a subject of its own, so that the pipeline may unsubscribe without stopping it.
      const results = new Subject<unknown>();
      const downstream = results.subscribe(subscriber);
      const subscription = source.subscribe({
        next: (next) => {
          value = next;
          gaveValue = true;
          results.next(next);
        },
        error: (reason: unknown) => {
          end({ status: 'rejected', reason });
          results.error(reason);
        },
        complete: () => {
          end({ status: 'fulfilled', value });
          results.complete();
        },
      });
      return () => {
        downstream.unsubscribe();
        if (ended) return;
        if (this.runsObservablesToCompletion) this.keptAlive.add(stop);
        else stop();
      };
    });
  }

  private start(): void {
    this.running += 1;
  }

  private end(settlement: HandlerSettlement): void {
    this.last = settlement;
    this.running -= 1;
    if (this.running > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}

/**
 * A handler that returns its own response object has answered (`return reply.send(…)` on Fastify): its value is
 * nothing more. Fastify's reply is thenable and settles once the response has gone out, which the module holds until
 * the handler's work is done; awaited as the handler's value, each would wait for the other.
 */
function ownAnswerSettled(value: unknown, args: unknown[]): unknown {
  return isThenable(value) && args.includes(value) ? undefined : value;
}

const TRACKED = Symbol('idempotency.trackedHandler');

/**
 * Wraps a route handler so that its invocations are tracked (`HandlerWork.invoke`). The wrapper carries the
 * handler's name, length and metadata, so that Nest and other decorators read it as the handler itself.
 */
export function trackedHandler<F extends (...args: never[]) => unknown>(handler: F): F {
  if (isWrapped(handler, TRACKED)) return handler;
  const tracked = function (this: unknown, ...args: Parameters<F>) {
    return HandlerWork.invoke(() => ownAnswerSettled(handler.apply(this, args), args));
  } as unknown as F;
  return standInFor(handler, tracked, TRACKED);
}
