import { AsyncLocalStorage } from 'node:async_hooks';
import { Logger } from '@nestjs/common';
import { isObservable, Observable } from 'rxjs';

/** How the handler's own invocation ended: its value, its error, or its Observable was unsubscribed first. */
export type HandlerSettlement =
  | { status: 'fulfilled'; value: unknown }
  | { status: 'rejected'; reason: unknown }
  | { status: 'cancelled' };

/** Thrown instead of running a handler whose request already has its outcome (its claim may be gone). */
export class HandlerInvokedAfterOutcomeError extends Error {
  constructor() {
    super('An idempotent handler was invoked after its request had been answered and its claim ended; it was not run.');
  }
}

const currentWork = new AsyncLocalStorage<HandlerWork>();
const logger = new Logger('Idempotency');

/**
 * The real invocation of an idempotent route's handler, as the method itself sees it. Interceptors between the
 * module's and the handler (a timeout that errors the Observable, a retry that calls it again) change what the
 * module's interceptor sees, not what the handler does: the claim is held until this work has settled.
 */
export class HandlerWork {
  private running = 0;
  private invoking = false;
  private closed = false;
  private last?: HandlerSettlement;
  private idleWaiters: Array<() => void> = [];

  /** Runs `fn` (the handler's pipeline) so that invocations of tracked handlers inside it count as this work. */
  static within<T>(work: HandlerWork, fn: () => T): T {
    return currentWork.run(work, fn);
  }

  /**
   * Invokes a tracked handler: as this work's invocation when inside one and not already inside the handler
   * (a handler calling another route method of its controller is part of its own invocation), plainly otherwise.
   */
  static invoke(call: () => unknown): unknown {
    const work = currentWork.getStore();
    if (!work || work.invoking || work.running > 0) return call();
    return work.track(call);
  }

  /** Whether an invocation of the handler is still running. */
  get busy(): boolean {
    return this.running > 0;
  }

  /** How the latest invocation ended; `undefined` when the handler was never invoked (a pipe or guard refused). */
  get settlement(): HandlerSettlement | undefined {
    return this.last;
  }

  /** Resolves once no invocation is running. */
  idle(): Promise<void> {
    if (this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** The outcome is decided: an invocation that starts later (a slow pipe outran by a timeout) must not run. */
  close(): void {
    this.closed = true;
  }

  private track(call: () => unknown): unknown {
    if (this.closed) {
      // Nobody awaits this invocation any more (its request was answered), so the refusal is only seen here.
      const refusal = new HandlerInvokedAfterOutcomeError();
      logger.error(refusal.message);
      throw refusal;
    }
    let result: unknown;
    this.invoking = true;
    try {
      result = call();
    } catch (reason) {
      this.last = { status: 'rejected', reason };
      throw reason;
    } finally {
      this.invoking = false;
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

  /** An Observable handler works while it is subscribed; unsubscribing it (a timeout) cancels that work. */
  private trackObservable(source: Observable<unknown>): Observable<unknown> {
    return new Observable((subscriber) => {
      this.start();
      let value: unknown;
      let ended = false;
      const end = (settlement: HandlerSettlement) => {
        if (ended) return;
        ended = true;
        this.end(settlement);
      };
      const subscription = source.subscribe({
        next: (next) => {
          value = next;
          subscriber.next(next);
        },
        error: (reason: unknown) => {
          end({ status: 'rejected', reason });
          subscriber.error(reason);
        },
        complete: () => {
          end({ status: 'fulfilled', value });
          subscriber.complete();
        },
      });
      return () => {
        subscription.unsubscribe();
        end({ status: 'cancelled' });
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

const TRACKED = Symbol('idempotency.trackedHandler');

/**
 * Wraps a route handler so that its invocations are tracked (`HandlerWork.invoke`). The wrapper carries the
 * handler's name, length and metadata, so that Nest and other decorators read it as the handler itself.
 */
export function trackedHandler<F extends (...args: never[]) => unknown>(handler: F): F {
  if ((handler as unknown as Record<symbol, unknown>)[TRACKED]) return handler;
  const tracked = function (this: unknown, ...args: Parameters<F>) {
    return HandlerWork.invoke(() => handler.apply(this, args));
  } as unknown as F;
  for (const key of Reflect.getOwnMetadataKeys(handler)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, handler), tracked);
  }
  Object.defineProperty(tracked, 'name', { value: handler.name });
  Object.defineProperty(tracked, 'length', { value: handler.length });
  Object.defineProperty(tracked, TRACKED, { value: true });
  return tracked;
}
