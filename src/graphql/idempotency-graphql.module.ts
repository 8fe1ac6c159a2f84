import { type ConfigurableModuleAsyncOptions, type DynamicModule, Module } from '@nestjs/common';
import type { IdempotencyGraphqlOptions } from './idempotency-graphql-options.interface.js';
import { ConfigurableIdempotencyGraphqlModule } from './idempotency-graphql.module-definition.js';
import { GraphqlTransport } from './graphql-transport.js';

/**
 * `IdempotencyGraphqlModule.forRoot(options?)`, imported beside `IdempotencyModule.forRoot()` and `GraphQLModule`:
 * `@Idempotent()` on a `@Mutation()` resolver runs each root field once per key and replays its stored result.
 */
@Module({ providers: [GraphqlTransport] })
export class IdempotencyGraphqlModule extends ConfigurableIdempotencyGraphqlModule {
  static forRoot(options: IdempotencyGraphqlOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  static forRootAsync(options: ConfigurableModuleAsyncOptions<IdempotencyGraphqlOptions>): DynamicModule {
    return super.forRootAsync(options);
  }
}
