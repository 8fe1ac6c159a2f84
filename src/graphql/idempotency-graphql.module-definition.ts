import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyGraphqlOptions } from './idempotency-graphql-options.interface.js';

export const { ConfigurableModuleClass: ConfigurableIdempotencyGraphqlModule, MODULE_OPTIONS_TOKEN: GRAPHQL_OPTIONS } =
  new ConfigurableModuleBuilder<IdempotencyGraphqlOptions>().setClassMethodName('forRoot').build();
