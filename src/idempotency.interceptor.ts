import type { ServerResponse } from 'node:http';
import {
  type CallHandler,
  type ExecutionContext,
  Inject,
  Injectable,
  Logger,
  type NestInterceptor,
} from '@nestjs/common';
import { RESPONSE_PASSTHROUGH_METADATA, ROUTE_ARGS_METADATA, SSE_METADATA } from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import { Reflector } from '@nestjs/core';
import { type Observable, of } from 'rxjs';
import { IDEMPOTENT_METADATA, PASS_THROUGH_METHODS } from './idempotency.constants.js';
import { IdempotencyError, IdempotencyKeyRequiredError } from './idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition.js';
import {
  endpointOf,
  type HttpRequest,
  rawBodyOf,
  replayResponse,
  requestUrlOf,
  setRetryAfter,
} from './idempotency-http.js';
import { parseIdempotencyKey } from './idempotency-key.js';
import type { IdempotencyModuleOptions, IdempotentOptions } from './idempotency-options.interface.js';
import { type IdempotencyPolicy, resolvePolicy } from './idempotency-policy.js';
import { IdempotencyService } from './idempotency.service.js';
import { captureResponse } from './response-capture.js';

/** What the interceptor knows of a route once: its policy and whether its response can be stored. */
interface RoutePlan {
  policy: IdempotencyPolicy;
  storable: boolean;
}

/**
 * The HTTP edge of the protocol, registered app-wide: reads the key, scope and fingerprint of requests to
 * `@Idempotent()` routes, lets `IdempotencyService` decide, and replays or captures the response.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  private readonly logger = new Logger('Idempotency');
  private readonly plans = new WeakMap<object, RoutePlan | null>();
  private readonly warnedEndpoints = new Set<string>();

  constructor(
    private readonly reflector: Reflector,
    private readonly idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) private readonly options: IdempotencyModuleOptions,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const plan = context.getType() === 'http' ? this.planFor(context) : null;
    if (!plan) return next.handle();
    const request = context.switchToHttp().getRequest<HttpRequest>();
    if (PASS_THROUGH_METHODS.has(request.method)) return next.handle();
    const { policy } = plan;
    const response = context.switchToHttp().getResponse<ServerResponse>();

    const key = parseIdempotencyKey(request.headers[policy.headerName.toLowerCase()], policy.headerName);
    if (key === undefined) {
      if (policy.required) throw new IdempotencyKeyRequiredError(policy.headerName);
      return next.handle();
    }
    const scope = { account: await accountOf(context, policy), endpoint: endpointOf(request), key };
    const fingerprint = policy.fingerprint({ method: request.method, url: requestUrlOf(request), body: rawBodyOf(request) });

    const decision = await this.idempotency.begin(scope, fingerprint, policy).catch((error: unknown) => {
      if (error instanceof IdempotencyError && error.retryAfterSeconds !== undefined) {
        setRetryAfter(response, error.retryAfterSeconds);
      }
      throw error;
    });
    if (decision.action === 'replay') return of(replayResponse(response, decision.response, policy.replayHeaderName));

    const captureOptions = { storable: plan.storable, maxBodyBytes: policy.maxStoredBodyBytes, storedHeaders: policy.storedResponseHeaders };
    captureResponse(response, captureOptions, async (sent) => {
      if (!sent.storable) this.warnOnce(scope.endpoint, sent.reason);
      try {
        await this.idempotency.finish(decision.claim, sent.storable ? sent.response : undefined, policy);
      } catch (error) {
        this.logger.error(
          `Finalizing key ${JSON.stringify(key)} of ${scope.endpoint} failed: the response is sent, and the key ` +
            `stays in progress until its lease lapses. ${error}`,
        );
      }
    });
    return next.handle();
  }

  private planFor(context: ExecutionContext): RoutePlan | null {
    const handler = context.getHandler();
    let plan = this.plans.get(handler);
    if (plan === undefined) {
      const [methodOptions, classOptions] = this.reflector.getAll<(IdempotentOptions | undefined)[]>(IDEMPOTENT_METADATA, [
        handler,
        context.getClass(),
      ]);
      plan =
        methodOptions || classOptions
          ? { policy: resolvePolicy(this.options, { ...classOptions, ...methodOptions }), storable: !writesItsOwnResponse(context) }
          : null;
      this.plans.set(handler, plan);
    }
    return plan;
  }

  private warnOnce(endpoint: string, reason: string): void {
    if (this.warnedEndpoints.has(endpoint)) return;
    this.warnedEndpoints.add(endpoint);
    this.logger.warn(`Responses of ${endpoint} are not stored for replay (${reason}); their claims are released.`);
  }
}

async function accountOf(context: ExecutionContext, policy: IdempotencyPolicy): Promise<string> {
  if (!policy.accountResolver) return '';
  const account = await policy.accountResolver(context);
  if (typeof account !== 'string' || account.length === 0) {
    throw new Error('The idempotency accountResolver returned no account: authenticate the request before it runs.');
  }
  return account;
}

/** SSE routes and routes that take `@Res()`/`@Next()` without passthrough write their response themselves. */
function writesItsOwnResponse(context: ExecutionContext): boolean {
  const [handler, controller] = [context.getHandler(), context.getClass()];
  if (Reflect.getMetadata(SSE_METADATA, handler)) return true;
  // Nest's own rule (RouterExecutionContext.isResponseHandled), read from the same metadata.
  const args: Record<string, unknown> = Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, handler.name) ?? {};
  const takesResponse = Object.keys(args).some((key) => {
    const type = Number(key.split(':')[0]);
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
  return takesResponse && !Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, handler.name);
}
