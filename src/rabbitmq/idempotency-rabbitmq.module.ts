import { type ConfigurableModuleAsyncOptions, type DynamicModule, Module } from '@nestjs/common';
import type { IdempotencyRabbitMqOptions } from './idempotency-rabbitmq-options.interface.js';
import { UNGUARDED_MESSAGE_HANDLERS_REFUSED } from '../messages/unguarded-handlers.js';
import { ConfigurableIdempotencyRabbitMqModule } from './idempotency-rabbitmq.module-definition.js';
import { RabbitMqTransport } from './rabbitmq-transport.js';

/**
 * `IdempotencyRabbitMqModule.forRoot(options?)`, imported beside `IdempotencyModule.forRoot()`: `@Idempotent()` on
 * `@EventPattern()` and `@MessagePattern()` handlers of Nest's RabbitMQ server (`Transport.RMQ`, `noAck: false`) runs
 * each message once per key and acknowledges it once its outcome is stored: those handlers do not acknowledge
 * messages themselves.
 */
@Module({ providers: [RabbitMqTransport, UNGUARDED_MESSAGE_HANDLERS_REFUSED] })
export class IdempotencyRabbitMqModule extends ConfigurableIdempotencyRabbitMqModule {
  static forRoot(options: IdempotencyRabbitMqOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  static forRootAsync(options: ConfigurableModuleAsyncOptions<IdempotencyRabbitMqOptions>): DynamicModule {
    return super.forRootAsync(options);
  }
}
