import { type CallHandler, type ExecutionContext, HttpException, type Logger } from '@nestjs/common';
import type { HttpAdapterHost } from '@nestjs/core';
import { finalize, lastValueFrom, Observable, ReplaySubject, tap, timeout, TimeoutError } from 'rxjs';
import { isNestReplying } from './capture/nest-replies.js';
import type { OnceLog } from '../protocol/once-log.js';
import type { RoutePlan } from './requests/route-plans.js';
import type { IdempotencyPolicy } from '../protocol/idempotency-policy.js';
import type { IdempotencyAttempt } from '../protocol/idempotency-attempt.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import type { IdempotencyService } from '../protocol/idempotency.service.js';
import type { AttemptOutcome } from '../protocol/claim-ending.js';
import { errorResponse } from './answers/http-answers.js';
import type { HttpPlatform, HttpResponse } from './platforms/http-platform.js';
import type { HttpRoutePolicy } from './requests/http-policy.js';
import { HandlerWork } from './capture/handler-work.js';
import { isSerializableBody, responseForValue } from './capture/handler-outcome.js';
import { captureResponse, type ResponseCapture, type SentResponse } from './capture/response-capture.js';

/** What the attempt answered (or the handler would have), and whether the handler failed: its finality is HTTP's. */
type HandlerOutcome = Omit<AttemptOutcome, 'final'>;

/** How the handler's pipeline (the interceptors inside the module's, then the handler) ended. */
type PipelineEnd =
  | {
      status: 'completed';
      value: unknown;
      /** The handler's own invocation was still running then (a fallback value). */ whileHandlerRan: boolean;
    }
  | { status: 'errored'; error: unknown; whileHandlerRan: boolean }
  | { status: 'unsubscribed' };

/**
 * A timeout's answer (408, 504) to a handler that has given its value: the interceptors inside were still at work
 * on it. Any other error after the handler's value (an interceptor that turns `null` into a 404) is the outcome.
 */
function isTimeoutAfterWork(error: unknown, work: HandlerWork): boolean {
  const status = error instanceof HttpException ? error.getStatus() : undefined;
  return work.settlement?.status === 'fulfilled' && (error instanceof TimeoutError || status === 408 || status === 504);
}

/** The claimed request an attempt runs, as the interceptor read it. */
export interface AttemptRequest {
  plan: RoutePlan;
  context: ExecutionContext;
  /** The handler's pipeline: the interceptors inside the module's, then the handler. */
  next: CallHandler;
  method: string;
  response: HttpResponse;
  platform: HttpPlatform;
  key: string;
  endpoint: string;
}

/** What an attempt ends its claim with, sends through and logs to: the interceptor's. */
export interface AttemptServices {
  idempotency: IdempotencyService;
  /** Whose adapter sends a value as Nest would. */
  adapterHost: HttpAdapterHost;
  logger: Logger;
  once: OnceLog;
}

/**
 * One run of an idempotent route's handler under its claim (`run`): the handler's pipeline, how it ended, the
 * handler's real work (`HandlerWork`), and the end of the claim (`finish`), which comes once, from whichever is
 * first: the response's end (captured), a client that left, or a shutdown (answered).
 */
export class HttpAttempt {
  private readonly work: HandlerWork;
  /** How the handler's pipeline ended; `undefined` while it runs. */
  private pipeline: PipelineEnd | undefined;
  private pipelineTornDown!: () => void;
  /** The attempt is over once the handler's pipeline has ended and no invocation of the handler still runs. */
  private readonly workDone: Promise<void>;
  private finished = false;

  constructor(
    private readonly attempt: IdempotencyAttempt,
    private readonly request: AttemptRequest,
    private readonly services: AttemptServices,
  ) {
    this.work = new HandlerWork(request.plan.replayable);
    this.workDone = new Promise<void>((resolve) => (this.pipelineTornDown = resolve)).then(() => this.work.idle());
  }

  /** Captures the response, answers for the attempt on a shutdown, and runs the handler's pipeline. */
  start(): Observable<unknown> {
    const { plan, response } = this.request;
    const capture = captureResponse(
      response,
      {
        replayable: plan.replayable,
        maxBodyBytes: plan.http.maxStoredBodyBytes,
        storedHeaders: plan.http.storedResponseHeaders,
      },
      (sent) => this.finish(sent),
    );
    this.attempt.onAbandoned((error) => capture.answer(errorResponse(error, plan.http.profile)));
    const handled = this.handled();
    if (plan.replayable) return this.runToCompletion(handled, capture);
    // A stream whose client left may never be ended; its outcome is not stored anyway, so free the key.
    response.raw.once('close', () => setImmediate(() => capture.ended || void this.finish(undefined)));
    return handled;
  }

  /** The handler's pipeline, run within the claim and the handler's work, recording how it ended. */
  private handled(): Observable<unknown> {
    const { attempt, work } = this;
    let last: unknown;
    return new Observable<unknown>((subscriber) =>
      attempt.within(() => HandlerWork.within(work, () => this.request.next.handle().subscribe(subscriber))),
    ).pipe(
      tap({
        next: (value) => (last = value),
        error: (error: unknown) => this.pipelineEnded({ status: 'errored', error, whileHandlerRan: work.busy }),
        complete: () => {
          this.pipelineEnded({ status: 'completed', value: last, whileHandlerRan: work.busy });
          work.pipelineCompleted();
        },
      }),
      finalize(() => {
        this.pipeline ??= { status: 'unsubscribed' };
        this.pipelineTornDown();
      }),
    );
  }

  /** How the pipeline ended, as it errors or completes: what `finish` goes by from then on. */
  private pipelineEnded(end: PipelineEnd): void {
    this.pipeline = end;
  }

  /**
   * Ends the claim with the attempt's outcome, once (later calls answer nothing). `sent` is the response written,
   * or `undefined` when none was (the client left); what it answers is sent instead of it.
   */
  private async finish(sent: SentResponse | undefined): Promise<StoredResponse | undefined> {
    if (this.finished) return undefined;
    this.finished = true;
    const { attempt, work, pipeline } = this;
    const { plan, context, next, method, response, platform } = this.request;
    const { policy } = plan;
    const conclude = async ({ response, failed }: HandlerOutcome) => {
      work.close();
      // HTTP's rule of what is final: the route's `isFinalStatus`, on the response's status.
      const final = response !== undefined && plan.http.isFinalStatus(response.status);
      const error = await attempt.end({ response, failed, final });
      return error && errorResponse(error, plan.http.profile);
    };
    // An answer Nest sends for the handler while it or the interceptors inside still work (a timeout
    // interceptor, inside or outside the module's, answered for it) goes out at once, and the claim (and its
    // transaction) is held until the handler is done; its own outcome is then what a retry gets. A response
    // the handler writes itself (passthrough), outside Nest's reply, is its own answer.
    const answeredForHandler =
      pipeline === undefined ||
      work.busy ||
      (pipeline.status === 'errored' && isTimeoutAfterWork(pipeline.error, work));
    // Only a handler that takes its response (passthrough) writes it: from its own code, or from a callback of
    // its that Nest's reply is not behind, before the pipeline has ended (after, it is an exception filter).
    const writtenByHandler =
      plan.passthrough &&
      sent !== undefined &&
      (work.isCurrentHandler || (!isNestReplying(response.platformResponse) && pipeline === undefined));
    if (plan.replayable && !writtenByHandler && answeredForHandler) {
      const pipelineRun = () => attempt.within(() => HandlerWork.within(work, () => next.handle()));
      const route = { context, method, policy, http: plan.http, answered: sent, platform };
      void this.workDone
        .then(() => this.outcomeOfWork(this.pipeline as PipelineEnd, pipelineRun, route))
        .then(conclude);
      return undefined;
    }
    if (sent && !sent.captured) this.warnUnstored(sent.reason);
    await this.workDone;
    return conclude({
      response: sent?.captured ? sent.response : undefined,
      failed: this.pipeline?.status === 'errored',
    });
  }

  /**
   * The handler's own outcome, for an attempt whose answer went out before the handler was done. A value is stored
   * as the pipeline makes it: as it came out of the pipeline when the pipeline ended after the handler (a timeout
   * outside the module's interceptor); otherwise (a timeout inside, or a fallback value it answered with) by running
   * the pipeline inside it again on the handler's value (the handler is not called again), so that the
   * interceptors there (a serializer, say) shape it as they would have. When it cannot be known that way (the
   * handler threw, and the application's exception filters did not render its error; the re-run failed; the value
   * cannot be stored), the answer the client got stands: stored when final, else released (and rolled back).
   */
  private async outcomeOfWork(
    pipeline: PipelineEnd,
    pipelineRun: () => Observable<unknown>,
    route: {
      context: ExecutionContext;
      method: string;
      policy: IdempotencyPolicy;
      http: HttpRoutePolicy;
      answered: SentResponse | undefined;
      platform: HttpPlatform;
    },
  ): Promise<HandlerOutcome> {
    const { work } = this;
    const { context, method, policy, http, answered, platform } = route;
    const asAnswered = { response: answered?.captured ? answered.response : undefined, failed: true };
    let value: unknown;
    if (pipeline.status === 'completed' && !pipeline.whileHandlerRan) value = pipeline.value;
    else if (work.settlement?.status === 'fulfilled') {
      work.replay(work.settlement.value);
      try {
        // Bounded: the inner pipeline answers at once with a value it is given, unless it is stuck.
        value = await lastValueFrom(pipelineRun().pipe(timeout(policy.storeTimeoutSeconds * 1000)), {
          defaultValue: undefined,
        });
      } catch {
        return asAnswered;
      }
    } else return asAnswered;
    const response = responseForValue(value, {
      handler: context.getHandler(),
      method,
      storedHeaders: http.storedResponseHeaders,
      maxBodyBytes: http.maxStoredBodyBytes,
      platform,
    });
    return response ? { response, failed: false } : asAnswered;
  }

  /**
   * Runs the handler to its end even when the client leaves. Nest tears down a handler's Observable on a
   * disconnect and then sends nothing, which would leave the claim neither stored nor released while the
   * handler's work may be done. Here the handler keeps running; if the client left and nothing was written
   * once it is done, its value is written to the closed response (so that it is captured and stored), or,
   * when it cannot be (an error, a stream), the claim is released.
   */
  private runToCompletion(handled: Observable<unknown>, capture: ResponseCapture): Observable<unknown> {
    const { raw, platformResponse } = this.request.response;
    // The client may have left already, while the claim was made (or waited for).
    let clientLeft = raw.destroyed || (raw.socket?.destroyed ?? false);
    raw.once('close', () => {
      clientLeft = !capture.ended;
    });
    // Nest writes the response a few microtasks after the handler is done; past them, it is not going to.
    const unlessNestResponds = (act: () => void) =>
      setImmediate(() => {
        if (clientLeft && !capture.ended) act();
      });
    const outcome = new ReplaySubject<unknown>(1);
    let last: unknown;
    handled.subscribe({
      next: (value) => {
        last = value;
        outcome.next(value);
      },
      error: (error: unknown) => {
        outcome.error(error);
        unlessNestResponds(() => void this.finish(undefined));
      },
      complete: () => {
        outcome.complete();
        unlessNestResponds(() => {
          try {
            if (!isSerializableBody(last)) throw new Error('not a body that can be sent as JSON or text');
            this.services.adapterHost.httpAdapter.reply(platformResponse, last);
          } catch {
            void this.finish(undefined); // nothing can be stored: free the key
          }
        });
      },
    });
    return outcome.asObservable();
  }

  private warnUnstored(reason: string): void {
    const { endpoint } = this.request;
    this.services.once.warn(
      `unstored ${endpoint}`,
      `Responses of ${endpoint} are not stored for replay (${reason}); their claims are released.`,
    );
  }
}
