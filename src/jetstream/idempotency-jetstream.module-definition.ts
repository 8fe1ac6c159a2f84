import { ConfigurableModuleBuilder } from '@nestjs/common';
import type { IdempotencyJetStreamOptions } from './idempotency-jetstream-options.interface.js';

export const {
  ConfigurableModuleClass: ConfigurableIdempotencyJetStreamModule,
  MODULE_OPTIONS_TOKEN: JETSTREAM_OPTIONS,
} = new ConfigurableModuleBuilder<IdempotencyJetStreamOptions>().setClassMethodName('forRoot').build();
