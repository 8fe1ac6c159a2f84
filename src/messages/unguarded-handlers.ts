import { Logger, type Provider, type Type } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { PATTERN_METADATA } from '@nestjs/microservices/constants.js';
import { runByTheModule } from '../protocol/current-run.js';
import { isWrapped, standInFor } from '../protocol/handler-wrapper.js';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import { IDEMPOTENT_METADATA } from '../protocol/idempotency.tokens.js';

type Handler = (...args: never[]) => unknown;
const REFUSING = Symbol('REFUSING_UNGUARDED');

/**
 * Wraps each `@Idempotent()` message handler of the application (a controller's method with a pattern, marked on
 * the method or its controller) so that it refuses to run where the module's interceptor did not run it: a
 * microservice connected to an HTTP application without `inheritAppConfig: true` gets none of the application's
 * interceptors, and its messages would run unguarded and never be acknowledged. Runs while Nest creates the
 * providers, before it binds the handlers to their patterns; wrapping twice (two brokers' modules) wraps once.
 */
export function refuseUnguardedMessageHandlers(modules: ModulesContainer, reflector: Reflector): number {
  let wrapped = 0;
  for (const module of modules.values()) {
    for (const { metatype } of module.controllers.values()) {
      if (typeof metatype !== 'function') continue;
      const controller = metatype as Type;
      const prototype = controller.prototype as Record<string, unknown>;
      for (const name of Object.getOwnPropertyNames(prototype)) {
        const descriptor = Object.getOwnPropertyDescriptor(prototype, name);
        const handler = descriptor?.value as Handler | undefined;
        if (name === 'constructor' || typeof handler !== 'function') continue;
        if (Reflect.getMetadata(PATTERN_METADATA, handler) === undefined) continue;
        if (!reflector.getAll(IDEMPOTENT_METADATA, [handler, controller]).some(Boolean)) continue;
        if (isWrapped(handler, REFUSING)) continue;
        Object.defineProperty(prototype, name, { ...descriptor, value: refusingUnguarded(handler, controller) });
        wrapped += 1;
      }
    }
  }
  return wrapped;
}

function refusingUnguarded(handler: Handler, controller: Type): Handler {
  const where = `${controller.name}.${handler.name}`;
  let logged = false;
  const refusing = function (this: unknown, ...args: never[]) {
    if (runByTheModule()) return handler.apply(this, args);
    const error = new IdempotencySetupError(
      `The @Idempotent() message handler ${where} was called without IdempotencyModule's interceptor, so its ` +
        'message was neither claimed nor acknowledged: a microservice connected to an HTTP application needs ' +
        '`app.connectMicroservice(options, { inheritAppConfig: true })` for the application-wide interceptor to run.',
    );
    if (!logged) new Logger('Idempotency').error(error.message);
    logged = true;
    throw error;
  };
  return standInFor(handler, refusing, REFUSING);
}

/**
 * The provider each broker's module lists for the wrapping above; nothing injects it, and Nest creates every
 * provider at start-up, before it binds handlers.
 */
export const UNGUARDED_MESSAGE_HANDLERS_REFUSED: Provider = {
  provide: Symbol('UNGUARDED_MESSAGE_HANDLERS_REFUSED'),
  inject: [ModulesContainer, Reflector],
  useFactory: refuseUnguardedMessageHandlers,
};
