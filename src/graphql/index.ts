// The public API of `nest-idempotency/graphql`: mutations of `@nestjs/graphql`. It loads `graphql` (an optional peer
// dependency), which the main entry point does not.
export { IdempotencyGraphqlModule } from './idempotency-graphql.module.js';
export type { IdempotencyGraphqlOptions } from './idempotency-graphql-options.interface.js';
export { graphqlErrorCode, GraphqlRefusal } from './graphql-refusals.js';
