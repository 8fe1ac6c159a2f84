import { Logger, type Provider, type Type } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { runByTheModule } from '../protocol/current-run.js';
import { isWrapped, standInFor } from '../transport-kit/handler-wrapper.js';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import { type MessageHandlerMethod, idempotentMessageHandlers } from './idempotent-message-handlers.js';

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
  for (const { controller, name, handler, descriptor } of idempotentMessageHandlers(modules, reflector)) {
    if (isWrapped(handler, REFUSING)) continue;
    const prototype = controller.prototype as object;
    Object.defineProperty(prototype, name, { ...descriptor, value: refusingUnguarded(handler, controller) });
    wrapped += 1;
  }
  return wrapped;
}

function refusingUnguarded(handler: MessageHandlerMethod, controller: Type): MessageHandlerMethod {
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
