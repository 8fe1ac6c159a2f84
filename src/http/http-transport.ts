import { isUtf8 } from 'node:buffer';
import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { catchError, type Observable, of, throwError } from 'rxjs';
import type { IdempotencyError } from '../protocol/idempotency.errors.js';
import { isStepRefusal } from '../protocol/idempotency-step.error.js';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import type { IdempotencyAttempt } from '../protocol/idempotency-attempt.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import type { IdempotentCall, IdempotencyTransport } from '../protocol/idempotency-transport.interface.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { IdempotencyTransports } from '../protocol/idempotency-transports.js';
import { responseForClient } from './capture/content-coding.js';
import { type AttemptServices, HttpAttempt } from './http-attempt.js';
import { httpExceptionFor, sendReplay } from './answers/http-answers.js';
import type { HttpIdempotencyModuleOptions } from './http-options.interface.js';
import type { HttpPlatform, HttpRequest, HttpResponse } from './platforms/http-platform.js';
import { httpPlatformFor, isSupportedHttpPlatform } from './platforms/http-platforms.js';
import { resolveHttpPolicy } from './requests/http-policy.js';
import type { HttpProfile } from './answers/http-profile.js';
import { readClaimTerms } from './requests/http-request-reading.js';
import { trackNestReplies } from './capture/nest-replies.js';
import { OnceLog } from '../protocol/once-log.js';
import { answeredElsewhere } from './capture/response-capture.js';
import { type RoutePlan, RoutePlans } from './requests/route-plans.js';

/** An idempotent HTTP request, as read: its claim's terms, and what the edge answers it through. */
interface HttpCall extends IdempotentCall {
  plan: RoutePlan;
  context: ExecutionContext;
  request: HttpRequest;
  platform: HttpPlatform;
}

/**
 * The HTTP transport (Express and Fastify, see `HttpPlatform`): reads the key, scope and fingerprint of requests to
 * `@Idempotent()` routes, replays a stored response byte for byte, runs the handler as an attempt (`HttpAttempt`) that
 * captures its response, and renders refusals as `HttpException`s for Nest's exception filters.
 */
@Injectable()
export class HttpTransport implements IdempotencyTransport<HttpCall>, OnApplicationBootstrap {
  readonly name = 'http';
  private readonly logger = new Logger('Idempotency');
  private readonly plans: RoutePlans;
  /** What has been logged already of what is logged once (per endpoint, or per set-up problem). */
  private readonly once = new OnceLog(this.logger);
  /** The application's HTTP platform, known once it is bootstrapped. */
  private platform?: HttpPlatform;
  /** What each attempt (`HttpAttempt`) ends its claim with, sends through and logs to. */
  private readonly attemptServices: AttemptServices;
  /** The request header carrying the key, the module's (routes do not set their own). */
  private readonly keyHeaderName: string;
  /** How refusals are worded, the module's (routes do not set their own). */
  private readonly profile: HttpProfile;

  constructor(
    reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    private readonly idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: ProtocolModuleOptions & HttpIdempotencyModuleOptions,
    transports: IdempotencyTransports,
  ) {
    transports.register(this);
    // Invalid HTTP options fail at start-up, not on the first request.
    ({ headerName: this.keyHeaderName, profile: this.profile } = resolveHttpPolicy(options));
    this.plans = new RoutePlans(reflector, options);
    this.attemptServices = { idempotency, adapterHost, logger: this.logger, once: this.once };
  }

  /** The HTTP adapter exists once the application is bootstrapped (none in an application context without HTTP). */
  onApplicationBootstrap(): void {
    const adapter = this.adapterHost.httpAdapter;
    if (!adapter) return;
    trackNestReplies(adapter);
    // An application without idempotent routes starts on any platform (`HttpPlatformCheck`); one with them, on these.
    const platform = adapter.getType();
    if (!isSupportedHttpPlatform(platform)) return;
    this.platform = httpPlatformFor(platform);
    this.platform.readRefusedBodies(adapter.getInstance<object>(), this.keyHeaderName);
  }

  readonly serves = { type: 'http' };

  async read(context: ExecutionContext): Promise<HttpCall | undefined> {
    const plan = this.plans.planFor(context);
    if (!plan) return undefined;
    const platform = (this.platform ??= httpPlatformFor(this.adapterHost.httpAdapter.getType()));
    const request = platform.requestOf(context.switchToHttp().getRequest<object>());
    const claimed = await readClaimTerms(context, plan, request, this.once);
    return claimed && { ...claimed, plan, context, request, platform };
  }

  /** The response a call is answered through (what the platform hands to interceptors, as the module handles it). */
  private responseOf({ platform, context }: Pick<HttpCall, 'platform' | 'context'>): HttpResponse {
    return platform.responseOf(context.switchToHttp().getResponse<object>());
  }

  replay(call: HttpCall, stored: StoredResponse): Observable<unknown> {
    const { plan, scope } = call;
    const response = this.responseOf(call);
    if (answeredElsewhere(response)) {
      this.warnAnsweredElsewhere(scope.endpoint);
      return of(undefined);
    }
    const replayed = this.replayFor(stored, call);
    sendReplay(response, replayed, plan.http.replayHeaderName);
    // What interceptors outside this one see; what Nest then sends for it is ignored.
    const { body } = replayed;
    return of(isUtf8(body) ? body.toString('utf8') : body);
  }

  async run(call: HttpCall, attempt: IdempotencyAttempt, next: CallHandler): Promise<Observable<unknown>> {
    const { plan, context, request, platform, scope } = call;
    const response = this.responseOf(call);
    // Answered while the claim was made (waited for), by something outside Nest's pipeline: Fastify's
    // `handlerTimeout`, a timeout middleware. Its client has that answer (a 503, say) and will retry: nothing more is
    // written to it, and the handler does not run (its work would be done with no client to hear of it, and its
    // retry would do it again), so the claim is released at once.
    if (answeredElsewhere(response)) {
      this.warnAnsweredElsewhere(scope.endpoint);
      await attempt.end({ response: undefined, failed: true, final: false });
      return of(undefined);
    }
    // A step's refusal (its recovery point not recorded in time: 503) is answered as the module's refusals are, not as
    // a fault of the handler's (500); other refusals the handler meets (a nested execute()'s) are its own errors.
    const refusing: CallHandler = {
      handle: () =>
        next
          .handle()
          .pipe(
            catchError((error: unknown) =>
              throwError(() => (isStepRefusal(error) ? this.refusal(error, call, context) : error)),
            ),
          ),
    };
    const claimed = {
      plan,
      context,
      next: refusing,
      method: request.method,
      response,
      platform,
      key: scope.key,
      endpoint: scope.endpoint,
    };
    return new HttpAttempt(attempt, claimed, this.attemptServices).start();
  }

  /**
   * The module's refusals reach Nest's exception filters as `HttpException`s (their `cause`, the refusal), worded by
   * the module's profile.
   */
  refusal(error: IdempotencyError, call: HttpCall | undefined, context: ExecutionContext): unknown {
    const platform = (this.platform ??= httpPlatformFor(this.adapterHost.httpAdapter.getType()));
    return httpExceptionFor(error, this.profile, this.responseOf({ platform, context }));
  }

  private warnAnsweredElsewhere(endpoint: string): void {
    this.once.warn(
      `answered ${endpoint}`,
      `A request to ${endpoint} was answered outside Nest (a timeout such as Fastify's handlerTimeout) ` +
        'while its claim was made: its handler was not run, and the claim was released for its retry. Such a ' +
        'timeout should outlast the claim (storeTimeoutSeconds, and inFlightWaitSeconds with inFlight: wait).',
    );
  }

  /**
   * The stored response in a form the client reads: decoded when it does not accept the coding of a compressed body.
   * One that no longer decodes within `maxStoredBodyBytes` (lowered since it was stored) goes out as stored, in its
   * coding, which its `Content-Encoding` names.
   */
  private replayFor(stored: StoredResponse, { request, plan, scope }: HttpCall): StoredResponse {
    const { maxStoredBodyBytes } = plan.http;
    const replayed = responseForClient(stored, request.headers['accept-encoding'], maxStoredBodyBytes);
    if (replayed) return replayed;
    this.once.warn(
      `undecodable ${scope.endpoint}`,
      `A stored response of ${scope.endpoint} does not decode within maxStoredBodyBytes (${maxStoredBodyBytes} ` +
        'bytes) for a client that does not accept its Content-Encoding: it is replayed in that coding.',
    );
    return stored;
  }
}
