import { Inject, Injectable } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { IdempotencyTransports } from '../protocol/idempotency-transports.js';
import type { MessageDelivery } from '../messages/message-delivery.interface.js';
import { resolveConsumerOptions } from '../messages/message-consumer-options.js';
import { MessageTransport } from '../messages/message-transport.js';
import type { IdempotencyJetStreamOptions } from './idempotency-jetstream-options.interface.js';
import { JETSTREAM_OPTIONS } from './idempotency-jetstream.module-definition.js';
import { JetStreamContext } from './jetstream-context.js';

/**
 * Messages of `JetStreamServer` (`JetStreamContext`): scoped as `jetstream <subject> <Consumer.method>`, settled
 * through their context's delivery, which the server then leaves as it is.
 */
@Injectable()
export class JetStreamTransport extends MessageTransport<JetStreamContext> {
  constructor(
    reflector: Reflector,
    modules: ModulesContainer,
    idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) moduleOptions: ProtocolModuleOptions,
    @Inject(JETSTREAM_OPTIONS) options: IdempotencyJetStreamOptions,
    transports: IdempotencyTransports,
  ) {
    super(
      'jetstream',
      JetStreamContext,
      undefined,
      reflector,
      modules,
      idempotency,
      moduleOptions,
      resolveConsumerOptions(options, { header: 'Nats-Msg-Id' }),
    );
    transports.register(this);
  }

  protected deliveryOf(context: JetStreamContext): MessageDelivery {
    return context.getDelivery();
  }
}
