import type { Type } from '@nestjs/common';
import type { ModulesContainer } from '@nestjs/core';
import type { ProtocolIdempotentOptions, ProtocolModuleOptions } from './idempotency-options.interface.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';
import type { IdempotencyStore } from './idempotency-store.interface.js';
import { IDEMPOTENT_METADATA } from './idempotency.tokens.js';

type Handler = (...args: never[]) => unknown;

/**
 * Refuses to start an application whose store runs no transactional handler (`transactionsRefused`) while one is
 * transactional, by the module's options, a class's `@Idempotent()` or a method's, whatever its transport: its first
 * request would otherwise fail as if the store were down. Runs while Nest creates the providers, from the metadata.
 */
export function refuseTransactionalHandlers(
  modules: ModulesContainer,
  store: IdempotencyStore,
  options: ProtocolModuleOptions,
): true {
  if (store.transactionsRefused === undefined) return true;
  const transactional = new Set<string>();
  for (const module of modules.values()) {
    for (const { metatype } of [...module.controllers.values(), ...module.providers.values()]) {
      if (typeof metatype === 'function' && metatype.prototype) {
        for (const name of transactionalHandlersOf(metatype as Type)) transactional.add(name);
      }
    }
  }
  if (options.transactional === true) transactional.add("the module's own option `transactional: true`");
  if (transactional.size === 0) return true;
  throw new IdempotencySetupError(
    `The idempotency store runs no transactional handler, and ${[...transactional].join(', ')} ` +
      `${transactional.size === 1 ? 'is' : 'are'} transactional. ${store.transactionsRefused}.`,
  );
}

/** A class `@Idempotent({ transactional: true })` marks, and its methods (own and inherited) so marked. */
function transactionalHandlersOf(owner: Type): string[] {
  const classOptions = Reflect.getMetadata(IDEMPOTENT_METADATA, owner) as ProtocolIdempotentOptions | undefined;
  const found: string[] = [];
  if (classOptions?.transactional === true) found.push(owner.name);
  for (let proto = owner.prototype as object | null; proto && proto !== Object.prototype;) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const handler = Object.getOwnPropertyDescriptor(proto, name)?.value as Handler | undefined;
      if (name === 'constructor' || typeof handler !== 'function') continue;
      const methodOptions = Reflect.getMetadata(IDEMPOTENT_METADATA, handler) as ProtocolIdempotentOptions | undefined;
      if (methodOptions?.transactional === true) found.push(`${owner.name}.${name}`);
    }
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return found;
}
