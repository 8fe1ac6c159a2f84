import { type ConfigurableModuleAsyncOptions, type DynamicModule, Module } from '@nestjs/common';
import type { IdempotencyGraphQLOptions } from './idempotency-graphql-options.interface.js';
import { ConfigurableIdempotencyGraphQLModule } from './idempotency-graphql.module-definition.js';
import { GraphqlTransport } from './graphql-transport.js';
import { IDEMPOTENT_NON_MUTATIONS_REFUSED } from './idempotent-resolvers.js';

/**
 * `IdempotencyGraphQLModule.forRoot(options?)`, imported beside `IdempotencyModule.forRoot()` and `GraphQLModule`:
 * `@Idempotent()` on a `@Mutation()` resolver runs each root field once per key and replays its stored result.
 */
@Module({ providers: [GraphqlTransport, IDEMPOTENT_NON_MUTATIONS_REFUSED] })
export class IdempotencyGraphQLModule extends ConfigurableIdempotencyGraphQLModule {
  static forRoot(options: IdempotencyGraphQLOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  static forRootAsync(options: ConfigurableModuleAsyncOptions<IdempotencyGraphQLOptions>): DynamicModule {
    return super.forRootAsync(options);
  }
}
