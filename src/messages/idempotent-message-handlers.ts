import type { Type } from '@nestjs/common';
import type { ModulesContainer, Reflector } from '@nestjs/core';
import type { Transport } from '@nestjs/microservices';
import { PATTERN_HANDLER_METADATA, PATTERN_METADATA, TRANSPORT_METADATA } from '@nestjs/microservices/constants.js';
import { PatternHandler } from '@nestjs/microservices/enums/pattern-handler.enum.js';
import { transformPatternToRoute } from '@nestjs/microservices/utils/transform-pattern.utils.js';
import { IDEMPOTENT_METADATA } from '../protocol/idempotency.tokens.js';

/** A controller's handler method, as it is on its prototype. */
export type MessageHandlerMethod = (...args: never[]) => unknown;

/** An `@Idempotent()` message handler of the application: a controller's method with a pattern. */
export interface IdempotentMessageHandler {
  controller: Type;
  /** The method's name on the controller's prototype. */
  name: string;
  handler: MessageHandlerMethod;
  descriptor: PropertyDescriptor;
}

/** Every `@Idempotent()` message handler of the application's controllers (marked on the method or its controller). */
export function* idempotentMessageHandlers(
  modules: ModulesContainer,
  reflector: Reflector,
): Generator<IdempotentMessageHandler> {
  for (const module of modules.values()) {
    for (const { metatype } of module.controllers.values()) {
      if (typeof metatype !== 'function') continue;
      const controller = metatype as Type;
      const prototype = controller.prototype as Record<string, unknown>;
      for (const name of Object.getOwnPropertyNames(prototype)) {
        const descriptor = Object.getOwnPropertyDescriptor(prototype, name);
        const handler = descriptor?.value as MessageHandlerMethod | undefined;
        if (!descriptor || name === 'constructor' || typeof handler !== 'function') continue;
        if (Reflect.getMetadata(PATTERN_METADATA, handler) === undefined) continue;
        if (!reflector.getAll(IDEMPOTENT_METADATA, [handler, controller]).some(Boolean)) continue;
        yield { controller, name, handler, descriptor };
      }
    }
  }
}

/**
 * The idempotent event handlers of each pattern (as `Consumer.method`), on a server of `transport` (Nest's built-in
 * transport of the broker, or `undefined` for a custom one): Nest runs every event handler of a pattern with one
 * message, and the message is settled once each has stored its outcome. Keyed by `patternKey()`.
 */
export function idempotentEventHandlersByPattern(
  modules: ModulesContainer,
  reflector: Reflector,
  transport: Transport | undefined,
): Map<string, ReadonlySet<string>> {
  const byPattern = new Map<string, Set<string>>();
  for (const { controller, handler } of idempotentMessageHandlers(modules, reflector)) {
    if (Reflect.getMetadata(PATTERN_HANDLER_METADATA, handler) !== PatternHandler.EVENT) continue;
    // `@EventPattern(pattern, Transport.X)`: registered on the servers of that transport only.
    const only = Reflect.getMetadata(TRANSPORT_METADATA, handler) as Transport | symbol | undefined;
    if (only !== undefined && only !== transport) continue;
    for (const pattern of [Reflect.getMetadata(PATTERN_METADATA, handler) as unknown].flat()) {
      const key = patternKey(pattern);
      const consumers = byPattern.get(key) ?? new Set<string>();
      consumers.add(`${controller.name}.${handler.name}`);
      byPattern.set(key, consumers);
    }
  }
  return byPattern;
}

/**
 * A pattern as Nest routes it (an object's keys sorted), whether from a handler's metadata or a message's context (an
 * object pattern arrives there as JSON text).
 */
export function patternKey(pattern: unknown): string {
  if (typeof pattern === 'string' && pattern.startsWith('{')) {
    try {
      return transformPatternToRoute(JSON.parse(pattern) as Record<string, string>);
    } catch {
      return pattern;
    }
  }
  return transformPatternToRoute(pattern as string);
}
