// The public API of `nest-idempotency/graphql`: mutations of `@nestjs/graphql`. It loads `graphql` (an optional peer
// dependency), which the main entry point does not.
export { IdempotencyGraphQLModule } from './idempotency-graphql.module.js';
export type { IdempotencyGraphQLOptions } from './idempotency-graphql-options.interface.js';
export { graphqlErrorCode, GraphqlRefusal } from './graphql-refusals.js';
