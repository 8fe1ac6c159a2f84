import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyRabbitMqOptions } from './idempotency-rabbitmq-options.interface.js';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyRabbitMqModule,
  MODULE_OPTIONS_TOKEN: RABBITMQ_OPTIONS,
} = new ConfigurableModuleBuilder<IdempotencyRabbitMqOptions>().setClassMethodName('forRoot').build();
