import { type ConfigurableModuleAsyncOptions, type DynamicModule, Module } from '@nestjs/common';
import type { IdempotencyJetStreamOptions } from './idempotency-jetstream-options.interface.js';
import { ConfigurableIdempotencyJetStreamModule } from './idempotency-jetstream.module-definition.js';
import { JetStreamTransport } from './jetstream-transport.js';
import { UNGUARDED_MESSAGE_HANDLERS_REFUSED } from '../messages/unguarded-handlers.js';

/**
 * `IdempotencyJetStreamModule.forRoot(options?)`, imported beside `IdempotencyModule.forRoot()`: `@Idempotent()` on
 * `@EventPattern()` and `@MessagePattern()` handlers of `JetStreamServer` runs each message once per key and
 * acknowledges it once its outcome is stored.
 */
@Module({ providers: [JetStreamTransport, UNGUARDED_MESSAGE_HANDLERS_REFUSED] })
export class IdempotencyJetStreamModule extends ConfigurableIdempotencyJetStreamModule {
  static forRoot(options: IdempotencyJetStreamOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  static forRootAsync(options: ConfigurableModuleAsyncOptions<IdempotencyJetStreamOptions>): DynamicModule {
    return super.forRootAsync(options);
  }
}
