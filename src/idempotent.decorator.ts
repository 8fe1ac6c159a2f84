import { PATH_METADATA } from '@nestjs/common/constants.js';
import { IDEMPOTENT_METADATA } from './idempotency.constants.js';
import type { IdempotentOptions } from './idempotency-options.interface.js';
import { resolvePolicy } from './idempotency-policy.js';
import { trackedHandler } from './handler-work.js';

type Handler = (...args: never[]) => unknown;

/**
 * Makes a route (or every route of a controller) safe to retry: requests carrying the same
 * Idempotency-Key run the handler once and replay its stored outcome. GET, HEAD, OPTIONS and DELETE
 * pass through. Options given here override the module's; a method's override its controller's.
 *
 * The decorated handlers are wrapped so that the module sees their real invocation: the claim is held until
 * the handler's own work has settled, whatever interceptors between the module's and the handler do.
 */
export const Idempotent = (options: IdempotentOptions = {}): ClassDecorator & MethodDecorator => {
  resolvePolicy({}, options); // invalid options fail where they are written, at start-up
  return ((target: object, key?: string | symbol, descriptor?: PropertyDescriptor) => {
    if (descriptor) {
      descriptor.value = trackedHandler(descriptor.value as Handler);
      Reflect.defineMetadata(IDEMPOTENT_METADATA, options, descriptor.value);
      return descriptor;
    }
    trackRoutesOf(target as new () => unknown);
    Reflect.defineMetadata(IDEMPOTENT_METADATA, options, target);
    return target;
  }) as ClassDecorator & MethodDecorator;
};

/** Wraps every route handler of a controller, inherited ones on the controller's own prototype (the base class's stay as they are). */
function trackRoutesOf(controller: new () => unknown): void {
  const own = controller.prototype as Record<string, unknown>;
  const seen = new Set<string>();
  for (let proto = own; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as Record<string, unknown>) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name === 'constructor' || seen.has(name)) continue;
      seen.add(name);
      const descriptor = Object.getOwnPropertyDescriptor(proto, name);
      if (typeof descriptor?.value !== 'function' || Reflect.getMetadata(PATH_METADATA, descriptor.value) === undefined) continue;
      Object.defineProperty(own, name, { ...descriptor, value: trackedHandler(descriptor.value as Handler) });
    }
  }
}
