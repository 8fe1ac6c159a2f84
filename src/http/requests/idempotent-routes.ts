import type { Type } from '@nestjs/common';
import { PATH_METADATA } from '@nestjs/common/constants.js';
import type { ModulesContainer, Reflector } from '@nestjs/core';
import { trackedHandler } from '../capture/handler-work.js';
import type { HttpIdempotentOptions } from '../http-options.interface.js';
import { resolveHttpPolicy } from './http-policy.js';
import { IDEMPOTENT_METADATA } from '../../protocol/idempotency.tokens.js';

type Handler = (...args: never[]) => unknown;

/**
 * Wraps the handler of every idempotent route of the application (marked on the method, on its controller, or
 * on a base class the controller inherits from) so that the module sees the handler's real invocation, and checks
 * the route's HTTP options, so that a wrong one refuses the start with its name rather than a request.
 * Runs while Nest creates the providers, before it binds the routes to their handlers. A route inherited by a
 * marked and an unmarked controller is wrapped on the marked controller's prototype only. Returns how many routes
 * it wrapped.
 */
export function trackIdempotentRoutes(modules: ModulesContainer, reflector: Reflector): number {
  let tracked = 0;
  for (const module of modules.values()) {
    for (const wrapper of module.controllers.values()) {
      if (typeof wrapper.metatype === 'function') tracked += trackRoutesOf(wrapper.metatype as Type, reflector);
    }
  }
  return tracked;
}

function trackRoutesOf(controller: Type, reflector: Reflector): number {
  let tracked = 0;
  const own = controller.prototype as Record<string, unknown>;
  const seen = new Set<string>();
  for (
    let proto = own;
    proto && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto) as Record<string, unknown>
  ) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name === 'constructor' || seen.has(name)) continue;
      seen.add(name);
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      const handler = descriptor?.value as Handler | undefined;
      if (typeof handler !== 'function' || Reflect.getMetadata(PATH_METADATA, handler) === undefined) continue;
      const [methodOptions, classOptions] = reflector.getAll<(HttpIdempotentOptions | undefined)[]>(
        IDEMPOTENT_METADATA,
        [handler, controller],
      );
      if (!methodOptions && !classOptions) continue;
      resolveHttpPolicy({}, { ...classOptions, ...methodOptions });
      Object.defineProperty(own, name, { ...descriptor, value: trackedHandler(handler) });
      tracked += 1;
    }
  }
  return tracked;
}
