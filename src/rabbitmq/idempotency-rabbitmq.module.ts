import { type ConfigurableModuleAsyncOptions, type DynamicModule, Module } from '@nestjs/common';
import type { IdempotencyRabbitMQOptions } from './idempotency-rabbitmq-options.interface.js';
import { UNGUARDED_MESSAGE_HANDLERS_REFUSED } from '../messages/unguarded-handlers.js';
import { ConfigurableIdempotencyRabbitMQModule } from './idempotency-rabbitmq.module-definition.js';
import { RabbitMQTransport } from './rabbitmq-transport.js';

/**
 * `IdempotencyRabbitMQModule.forRoot(options?)`, imported beside `IdempotencyModule.forRoot()`: `@Idempotent()` on
 * `@EventPattern()` and `@MessagePattern()` handlers of Nest's RabbitMQ server (`Transport.RMQ`, `noAck: false`) runs
 * each message once per key and acknowledges it once its outcome is stored: those handlers do not acknowledge
 * messages themselves.
 */
@Module({ providers: [RabbitMQTransport, UNGUARDED_MESSAGE_HANDLERS_REFUSED] })
export class IdempotencyRabbitMQModule extends ConfigurableIdempotencyRabbitMQModule {
  static forRoot(options: IdempotencyRabbitMQOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  static forRootAsync(options: ConfigurableModuleAsyncOptions<IdempotencyRabbitMQOptions>): DynamicModule {
    return super.forRootAsync(options);
  }
}
