import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyRabbitMQOptions } from './idempotency-rabbitmq-options.interface.js';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyRabbitMQModule,
  MODULE_OPTIONS_TOKEN: RABBITMQ_OPTIONS,
} = new ConfigurableModuleBuilder<IdempotencyRabbitMQOptions>().setClassMethodName('forRoot').build();
