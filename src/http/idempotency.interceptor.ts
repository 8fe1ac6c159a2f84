import { isUtf8 } from 'node:buffer';
import {
  type CallHandler,
  type ExecutionContext,
  HttpException,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { finalize, lastValueFrom, Observable, of, ReplaySubject, tap, timeout, TimeoutError } from 'rxjs';
import { PASS_THROUGH_METHODS } from './http.constants.js';
import { isNestReplying, trackNestReplies } from './nest-replies.js';
import { RoutePlans } from './route-plans.js';
import { OnceLog } from './once-log.js';
import { accountOf } from './request-account.js';
import {
  IdempotencyError,
  IdempotencyKeyRequiredError,
  IdempotencyMisconfiguredError,
} from '../protocol/idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import { runWithin } from '../protocol/current-run.js';
import { httpExceptionFor } from './http-errors.js';
import { endpointOf, errorResponse, fingerprintInputOf, sendReplay, setRetryAfter } from './idempotency-http.js';
import {
  type HttpPlatform,
  httpPlatformFor,
  type HttpRequest,
  type HttpResponse,
  isSupportedHttpPlatform,
} from './http-platform.js';
import { parseIdempotencyKey } from './idempotency-key.js';
import type { FingerprintInput, IdempotencyModuleOptions } from '../protocol/idempotency-options.interface.js';
import type { IdempotencyPolicy } from '../protocol/idempotency-policy.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import type { AttemptOutcome } from '../protocol/outcome-writer.js';
import { HandlerWork } from './handler-work.js';
import { isSerializableBody, responseForValue } from './handler-outcome.js';
import { answeredElsewhere, captureResponse, type ResponseCapture, type SentResponse } from './response-capture.js';

/** How the handler's pipeline (the interceptors inside this one, then the handler) ended. */
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

/**
 * The HTTP edge of the protocol, registered app-wide (Express and Fastify platforms, see `HttpPlatform`): reads the
 * key, scope and fingerprint of requests to `@Idempotent()` routes, lets `IdempotencyService` decide, and replays or
 * captures the response.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor, OnApplicationBootstrap {
  private readonly logger = new Logger('Idempotency');
  private readonly plans: RoutePlans;
  /** What has been logged already of what is logged once (per endpoint, or per set-up problem). */
  private readonly once = new OnceLog(this.logger);
  /** The application's HTTP platform, known once it is bootstrapped. */
  private platform?: HttpPlatform;

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    private readonly idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: IdempotencyModuleOptions,
  ) {
    this.plans = new RoutePlans(reflector, options);
  }

  /** The HTTP adapter exists once the application is bootstrapped (none in an application context without HTTP). */
  onApplicationBootstrap(): void {
    const adapter = this.adapterHost.httpAdapter;
    if (!adapter) return;
    trackNestReplies(adapter);
    // An application without idempotent routes starts on any platform (`HttpPlatformCheck`); one with them, on these.
    const platform = adapter.getType();
    if (isSupportedHttpPlatform(platform)) this.platform = httpPlatformFor(platform);
  }

  /** The module's refusals reach Nest's exception filters as `HttpException`s (their `cause`, the refusal). */
  intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    return this.interceptIdempotent(context, next).catch((error: unknown) => {
      throw error instanceof IdempotencyError ? httpExceptionFor(error) : error;
    });
  }

  private async interceptIdempotent(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const plan = context.getType() === 'http' ? this.plans.planFor(context) : null;
    if (!plan) return next.handle();
    const platform = (this.platform ??= httpPlatformFor(this.adapterHost.httpAdapter.getType()));
    const request = platform.requestOf(context.switchToHttp().getRequest<object>());
    if (PASS_THROUGH_METHODS.has(request.method)) return next.handle();
    const { policy } = plan;
    const response = platform.responseOf(context.switchToHttp().getResponse<object>());

    const key = parseIdempotencyKey(request.headers[policy.headerName.toLowerCase()], policy.headerName);
    if (key === undefined) {
      if (policy.required) throw new IdempotencyKeyRequiredError(policy.headerName);
      return next.handle();
    }
    const scope = {
      account: await accountOf(context, request, policy, this.once),
      endpoint: endpointOf(request, plan.version),
      key,
    };
    const fingerprint = policy.fingerprint(this.fingerprintInputOf(request));

    const terms = { key: policy.headerName, usedWith: 'request (method, path, query or body)' };
    const decision = await this.idempotency.begin(scope, fingerprint, policy, terms).catch((error: unknown) => {
      if (error instanceof IdempotencyError && error.retryAfterSeconds !== undefined) {
        setRetryAfter(response, error.retryAfterSeconds);
      }
      throw error;
    });
    // Answered while the claim was made (waited for), by something outside Nest's pipeline: Fastify's
    // `handlerTimeout`, a timeout middleware. Its client has that answer (a 503, say) and will retry: nothing more is
    // written to it, and the handler does not run (its work would be done with no client to hear of it, and its
    // retry would do it again), so the claim is released at once.
    if (answeredElsewhere(response)) {
      this.once.warn(
        `answered ${scope.endpoint}`,
        `A request to ${scope.endpoint} was answered outside Nest (a timeout such as Fastify's handlerTimeout) ` +
          'while its claim was made: its handler was not run, and the claim was released for its retry. Such a ' +
          'timeout should outlast the claim (storeTimeoutSeconds, and inFlightWaitSeconds with inFlight: wait).',
      );
      if (decision.action === 'replay') return of(undefined);
      await this.idempotency
        .finish(decision.run, { response: undefined, failed: true }, policy)
        .catch((error: unknown) =>
          this.logger.error(`Releasing key ${JSON.stringify(key)} of ${scope.endpoint} failed: ${error}`),
        );
      return of(undefined);
    }
    if (decision.action === 'replay') {
      sendReplay(response, decision.response, policy.replayHeaderName);
      // What interceptors outside this one see; what Nest then sends for it is ignored.
      const { body } = decision.response;
      return of(isUtf8(body) ? body.toString('utf8') : body);
    }

    const { run } = decision;
    const work = new HandlerWork(plan.replayable);
    let pipeline: PipelineEnd | undefined;
    let pipelineEnded!: () => void;
    // The attempt is over once the handler's pipeline has ended and no invocation of the handler still runs.
    const workDone = new Promise<void>((resolve) => (pipelineEnded = resolve)).then(() => work.idle());
    let finished = false;
    const finish = async (sent: SentResponse | undefined): Promise<StoredResponse | undefined> => {
      if (finished) return undefined;
      finished = true;
      const conclude = async (outcome: AttemptOutcome) => {
        work.close();
        try {
          const error = await this.idempotency.finish(run, outcome, policy);
          return error && errorResponse(error);
        } catch (error) {
          this.logger.error(`Finalizing key ${JSON.stringify(key)} of ${scope.endpoint} failed: ${error}`);
          return undefined;
        }
      };
      // An answer Nest sends for the handler while it or the interceptors inside still work (a timeout
      // interceptor, inside or outside this one, answered for it) goes out at once, and the claim (and its
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
        const pipelineRun = () => runWithin(run, () => HandlerWork.within(work, () => next.handle()));
        const route = { context, method: request.method, policy, answered: sent, platform };
        void workDone.then(() => this.outcomeOfWork(pipeline as PipelineEnd, work, pipelineRun, route)).then(conclude);
        return undefined;
      }
      if (sent && !sent.captured) this.warnOnce(scope.endpoint, sent.reason);
      await workDone;
      return conclude({ response: sent?.captured ? sent.response : undefined, failed: pipeline?.status === 'errored' });
    };
    const capture = captureResponse(
      response,
      {
        replayable: plan.replayable,
        maxBodyBytes: policy.maxStoredBodyBytes,
        storedHeaders: policy.storedResponseHeaders,
      },
      finish,
    );
    this.idempotency.onAbandoned(run, (error) => capture.answer(errorResponse(error)));
    let last: unknown;
    const handled = new Observable<unknown>((subscriber) =>
      runWithin(run, () => HandlerWork.within(work, () => next.handle().subscribe(subscriber))),
    ).pipe(
      tap({
        next: (value) => (last = value),
        error: (error: unknown) => (pipeline = { status: 'errored', error, whileHandlerRan: work.busy }),
        complete: () => {
          pipeline = { status: 'completed', value: last, whileHandlerRan: work.busy };
          work.pipelineCompleted();
        },
      }),
      finalize(() => {
        pipeline ??= { status: 'unsubscribed' };
        pipelineEnded();
      }),
    );
    if (plan.replayable) return this.runToCompletion(handled, response, capture, finish);
    // A stream whose client left may never be ended; its outcome is not stored anyway, so free the key.
    response.raw.once('close', () => setImmediate(() => capture.ended || void finish(undefined)));
    return handled;
  }

  /**
   * The handler's own outcome, for an attempt whose answer went out before the handler was done. A value is stored
   * as the pipeline makes it: as it came out of the pipeline when the pipeline ended after the handler (a timeout
   * outside this interceptor); otherwise (a timeout inside, or a fallback value it answered with) by running the
   * pipeline inside this interceptor again on the handler's value (the handler is not called again), so that the
   * interceptors there (a serializer, say) shape it as they would have. When it cannot be known that way (the
   * handler threw, and the application's exception filters did not render its error; the re-run failed; the value
   * cannot be stored), the answer the client got stands: stored when final, else released (and rolled back).
   */
  private async outcomeOfWork(
    pipeline: PipelineEnd,
    work: HandlerWork,
    pipelineRun: () => Observable<unknown>,
    route: {
      context: ExecutionContext;
      method: string;
      policy: IdempotencyPolicy;
      answered: SentResponse | undefined;
      platform: HttpPlatform;
    },
  ): Promise<AttemptOutcome> {
    const { context, method, policy, answered, platform } = route;
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
      storedHeaders: policy.storedResponseHeaders,
      maxBodyBytes: policy.maxStoredBodyBytes,
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
  private runToCompletion(
    handled: Observable<unknown>,
    { raw, platformResponse }: HttpResponse,
    capture: ResponseCapture,
    finish: (sent: undefined) => Promise<unknown>,
  ): Observable<unknown> {
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
        unlessNestResponds(() => void finish(undefined));
      },
      complete: () => {
        outcome.complete();
        unlessNestResponds(() => {
          try {
            if (!isSerializableBody(last)) throw new Error('not a body that can be sent as JSON or text');
            this.adapterHost.httpAdapter.reply(platformResponse, last);
          } catch {
            void finish(undefined); // nothing can be stored: free the key
          }
        });
      },
    });
    return outcome.asObservable();
  }

  /** What the request's fingerprint is computed from; a set-up problem it reveals is logged once, with its fix. */
  private fingerprintInputOf(request: HttpRequest): FingerprintInput {
    try {
      return fingerprintInputOf(request);
    } catch (error) {
      if (error instanceof IdempotencyMisconfiguredError) this.once.error(error.setupFix, error.setupFix);
      throw error;
    }
  }

  private warnOnce(endpoint: string, reason: string): void {
    this.once.warn(
      `unstored ${endpoint}`,
      `Responses of ${endpoint} are not stored for replay (${reason}); their claims are released.`,
    );
  }
}
