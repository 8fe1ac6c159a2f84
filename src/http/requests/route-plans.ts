import type { ExecutionContext, Type } from '@nestjs/common';
import {
  REDIRECT_METADATA,
  RENDER_METADATA,
  RESPONSE_PASSTHROUGH_METADATA,
  ROUTE_ARGS_METADATA,
  SSE_METADATA,
  VERSION_METADATA,
} from '@nestjs/common/constants.js';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum.js';
import type { Reflector } from '@nestjs/core';
import type { ProtocolIdempotentOptions, ProtocolModuleOptions } from '../../protocol/idempotency-options.interface.js';
import type { HttpIdempotencyModuleOptions, HttpIdempotentOptions } from '../http-options.interface.js';
import { type HttpRoutePolicy, resolveHttpPolicy } from './http-policy.js';
import { type IdempotencyPolicy, resolvePolicy } from '../../protocol/idempotency-policy.js';
import { HandlerPlans } from '../../transport-kit/handler-plans.js';

/** What the interceptor knows of a route once: its policy and whether its response can be stored. */
export interface RoutePlan {
  /** The protocol's options for the route. */
  policy: IdempotencyPolicy;
  /** The HTTP edge's options for the route: the key's header, the fingerprint, what of a response is stored. */
  http: HttpRoutePolicy;
  /** Nest sends its response from the handler's value (or the handler writes it through passthrough): it can be replayed. */
  replayable: boolean;
  /** The handler takes `@Res({ passthrough: true })`, so it may write (part of) the response itself. */
  passthrough: boolean;
  /**
   * The route's version (`@Version()`, or its controller's), which its template may not show (header and media-type
   * versioning): two versions of one template are two routes, and never share a key's scope.
   */
  version: string | undefined;
}

/** The plans of the application's routes, each read once from its metadata (`@Idempotent()` and Nest's own). */
export class RoutePlans {
  private readonly plans: HandlerPlans<RoutePlan, ProtocolIdempotentOptions & HttpIdempotentOptions>;

  constructor(reflector: Reflector, options: ProtocolModuleOptions & HttpIdempotencyModuleOptions) {
    this.plans = new HandlerPlans(reflector, (routeOptions, context) => ({
      policy: resolvePolicy(options, routeOptions),
      http: resolveHttpPolicy(options, routeOptions),
      ...responseHandlingOf(context.getClass(), context.getHandler()),
      version: versionOf(reflector.getAllAndOverride(VERSION_METADATA, [context.getHandler(), context.getClass()])),
    }));
  }

  /** The plan of the route `context` runs, or `null` when the route is not idempotent. */
  planFor(context: ExecutionContext): RoutePlan | null {
    return this.plans.planFor(context);
  }
}

/**
 * How a route's response is written. Not replayable: routes whose response Nest does not send from the handler's
 * value (SSE, `@Redirect()`, `@Render()`, and `@Res()`/`@Next()` without passthrough), since a replay could not be
 * sent the way they send. Passthrough: the handler takes `@Res({ passthrough: true })` and may write through it.
 */
function responseHandlingOf(controller: Type, handler: object): { replayable: boolean; passthrough: boolean } {
  // Route metadata is keyed by the method's property name, which a wrapping decorator may not keep as `handler.name`.
  const methodName = methodNameOf(controller, handler);
  if (methodName === undefined) return { replayable: false, passthrough: false };
  const passthrough = Boolean(Reflect.getMetadata(RESPONSE_PASSTHROUGH_METADATA, controller, methodName));
  if (
    [SSE_METADATA, REDIRECT_METADATA, RENDER_METADATA].some((key) => Reflect.getMetadata(key, handler) !== undefined)
  ) {
    return { replayable: false, passthrough };
  }
  const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, methodName) ?? {}) as Record<string, unknown>;
  const takesResponse = Object.keys(args).some((key) => {
    const type = Number(key.split(':')[0]) as RouteParamtypes;
    return type === RouteParamtypes.RESPONSE || type === RouteParamtypes.NEXT;
  });
  // Nest's own rule (RouterExecutionContext.isResponseHandled), read from the same metadata.
  return { replayable: !takesResponse || passthrough, passthrough };
}

function methodNameOf(controller: Type, handler: object): string | undefined {
  for (
    let proto = controller.prototype as object | null;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as object | null
  ) {
    const name = Object.getOwnPropertyNames(proto).find(
      (key) => Object.getOwnPropertyDescriptor(proto, key)?.value === handler,
    );
    if (name !== undefined) return name;
  }
  return undefined;
}

/** A route's version as text: one, several (in order), or none (unversioned, or `VERSION_NEUTRAL`: any version). */
function versionOf(version: unknown): string | undefined {
  if (typeof version === 'string') return version;
  if (Array.isArray(version)) return version.map(String).sort().join(',');
  return undefined;
}
