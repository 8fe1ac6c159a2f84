import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyGraphQLOptions } from './idempotency-graphql-options.interface.js';

export const { ConfigurableModuleClass: ConfigurableIdempotencyGraphQLModule, MODULE_OPTIONS_TOKEN: GRAPHQL_OPTIONS } =
  new ConfigurableModuleBuilder<IdempotencyGraphQLOptions>().setClassMethodName('forRoot').build();
