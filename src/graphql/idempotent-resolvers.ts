import type { Provider, Type } from '@nestjs/common';
import { ModulesContainer } from '@nestjs/core';
import { RESOLVER_PROPERTY_METADATA, RESOLVER_TYPE_METADATA } from '@nestjs/graphql';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import { IDEMPOTENT_METADATA } from '../protocol/idempotency.tokens.js';

type Handler = (...args: never[]) => unknown;

/**
 * Refuses to start an application with `@Idempotent()` on a resolver method that is not a root mutation field (a
 * `@Query()`, a `@Subscription()`, a `@ResolveField()` of an object type), which the module would never claim: the
 * decorator would promise retries a safety they do not get. A resolver class marked as a whole is not refused: its
 * mutations are claimed, its other fields pass. Runs while Nest creates the providers, from the decorators' metadata.
 */
export function refuseIdempotentNonMutations(modules: ModulesContainer): void {
  const mistakes: string[] = [];
  for (const module of modules.values()) {
    for (const { metatype } of module.providers.values()) {
      if (typeof metatype === 'function' && metatype.prototype) mistakes.push(...nonMutationsMarked(metatype as Type));
    }
  }
  if (mistakes.length === 0) return;
  throw new IdempotencySetupError(
    `@Idempotent() is on ${[...new Set(mistakes)].join(', ')}, which the module never claims: only root fields of ` +
      'mutations (`@Mutation()`) are, since a query is read-only and a field resolver runs within its mutation, ' +
      'claimed as a whole. Remove @Idempotent() there (or mark the mutation, or the resolver class as a whole).',
  );
}

/**
 * The methods of a provider (its own and inherited) marked `@Idempotent()` that resolve GraphQL fields other than
 * root mutation fields; a provider that is no resolver has none.
 */
function nonMutationsMarked(resolver: Type): string[] {
  // Schema-first, `@Resolver('Mutation')` with `@ResolveField()` methods resolves the Mutation type's fields.
  const resolvesMutation = Reflect.getMetadata(RESOLVER_TYPE_METADATA, resolver) === 'Mutation';
  const marked: string[] = [];
  for (let proto = resolver.prototype as object | null; proto && proto !== Object.prototype;) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      const handler = Object.getOwnPropertyDescriptor(proto, name)?.value as Handler | undefined;
      if (name === 'constructor' || typeof handler !== 'function') continue;
      if (Reflect.getMetadata(IDEMPOTENT_METADATA, handler) === undefined) continue;
      const rootType = Reflect.getMetadata(RESOLVER_TYPE_METADATA, handler) as string | undefined;
      const isField = Reflect.getMetadata(RESOLVER_PROPERTY_METADATA, handler) === true;
      if (rootType === 'Mutation' || (isField && resolvesMutation)) continue;
      if (rootType !== undefined || isField)
        marked.push(`${resolver.name}.${name} (a ${rootType ?? 'field resolver'})`);
    }
    proto = Object.getPrototypeOf(proto) as object | null;
  }
  return marked;
}

/** The provider the module lists for the check above; nothing injects it, and Nest creates every provider at start-up. */
export const IDEMPOTENT_NON_MUTATIONS_REFUSED: Provider = {
  provide: Symbol('IDEMPOTENT_NON_MUTATIONS_REFUSED'),
  inject: [ModulesContainer],
  useFactory: refuseIdempotentNonMutations,
};
