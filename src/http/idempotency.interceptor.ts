import { isUtf8 } from 'node:buffer';
import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { type Observable, of } from 'rxjs';
import { PASS_THROUGH_METHODS } from './http.constants.js';
import { trackNestReplies } from './nest-replies.js';
import { RoutePlans } from './route-plans.js';
import { OnceLog } from './once-log.js';
import { accountOf } from './request-account.js';
import {
  IdempotencyError,
  IdempotencyKeyRequiredError,
  IdempotencyMisconfiguredError,
} from '../protocol/idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import { httpExceptionFor } from './http-errors.js';
import { endpointOf, fingerprintInputOf, sendReplay, setRetryAfter } from './idempotency-http.js';
import { type HttpPlatform, httpPlatformFor, type HttpRequest, isSupportedHttpPlatform } from './http-platform.js';
import { parseIdempotencyKey } from './idempotency-key.js';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import type { FingerprintInput, HttpIdempotencyModuleOptions } from './http-options.interface.js';
import { type HttpRoutePolicy, resolveHttpPolicy } from './http-policy.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { answeredElsewhere } from './response-capture.js';
import { responseForClient } from './content-coding.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import { type AttemptServices, HttpAttempt } from './http-attempt.js';

/**
 * The HTTP edge of the protocol, registered app-wide (Express and Fastify platforms, see `HttpPlatform`): reads the
 * key, scope and fingerprint of requests to `@Idempotent()` routes, lets `IdempotencyService` decide, and replays the
 * stored response or runs the handler as an attempt (`HttpAttempt`), which captures its response.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor, OnApplicationBootstrap {
  private readonly logger = new Logger('Idempotency');
  private readonly plans: RoutePlans;
  /** What has been logged already of what is logged once (per endpoint, or per set-up problem). */
  private readonly once = new OnceLog(this.logger);
  /** The application's HTTP platform, known once it is bootstrapped. */
  private platform?: HttpPlatform;
  /** What each attempt (`HttpAttempt`) ends its claim with, sends through and logs to. */
  private readonly attemptServices: AttemptServices;

  constructor(
    private readonly reflector: Reflector,
    private readonly adapterHost: HttpAdapterHost,
    private readonly idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: ProtocolModuleOptions & HttpIdempotencyModuleOptions,
  ) {
    resolveHttpPolicy(options); // invalid HTTP options fail at start-up, not on the first request
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
    const { policy, http } = plan;
    const response = platform.responseOf(context.switchToHttp().getResponse<object>());

    const key = parseIdempotencyKey(request.headers[http.headerName.toLowerCase()], http.headerName);
    if (key === undefined) {
      if (http.required) throw new IdempotencyKeyRequiredError(http.headerName);
      return next.handle();
    }
    const scope = {
      account: await accountOf(context, request, policy, this.once),
      endpoint: endpointOf(request, plan.version),
      key,
    };
    const fingerprint = http.fingerprint(this.fingerprintInputOf(request));

    const terms = { key: http.headerName, usedWith: 'request (method, path, query or body)' };
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
      const replayed = this.replayFor(decision.response, request, http, scope.endpoint);
      sendReplay(response, replayed, http.replayHeaderName);
      // What interceptors outside this one see; what Nest then sends for it is ignored.
      const { body } = replayed;
      return of(isUtf8(body) ? body.toString('utf8') : body);
    }

    const claimed = { plan, context, next, method: request.method, response, platform, key, endpoint: scope.endpoint };
    return new HttpAttempt(decision.run, claimed, this.attemptServices).start();
  }

  /**
   * The stored response in a form the client reads: decoded when it does not accept the coding of a compressed body.
   * One that no longer decodes within `maxStoredBodyBytes` (lowered since it was stored) goes out as stored, in its
   * coding, which its `Content-Encoding` names.
   */
  private replayFor(
    stored: StoredResponse,
    request: HttpRequest,
    http: HttpRoutePolicy,
    endpoint: string,
  ): StoredResponse {
    const replayed = responseForClient(stored, request.headers['accept-encoding'], http.maxStoredBodyBytes);
    if (replayed) return replayed;
    this.once.warn(
      `undecodable ${endpoint}`,
      `A stored response of ${endpoint} does not decode within maxStoredBodyBytes (${http.maxStoredBodyBytes} ` +
        'bytes) for a client that does not accept its Content-Encoding: it is replayed in that coding.',
    );
    return stored;
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
}
