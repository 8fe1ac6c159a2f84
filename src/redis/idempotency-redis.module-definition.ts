import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyRedisOptions } from './idempotency-redis-options.interface.js';
import { IDEMPOTENCY_REDIS_OPTIONS } from './redis.tokens.js';

export const { ConfigurableModuleClass: ConfigurableIdempotencyRedisModule } =
  new ConfigurableModuleBuilder<IdempotencyRedisOptions>({ optionsInjectionToken: IDEMPOTENCY_REDIS_OPTIONS })
    .setClassMethodName('forRoot')
    .build();
