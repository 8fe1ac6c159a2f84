import { Inject, Injectable } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { RmqContext, Transport } from '@nestjs/microservices';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { IdempotencyTransports } from '../protocol/idempotency-transports.js';
import { resolveConsumerOptions } from '../messages/message-consumer-options.js';
import { MessageTransport } from '../messages/message-transport.js';
import type { IdempotencyRabbitMQOptions } from './idempotency-rabbitmq-options.interface.js';
import { RABBITMQ_OPTIONS } from './idempotency-rabbitmq.module-definition.js';
import { RabbitMQDelivery } from './rabbitmq-delivery.js';
import { warnUnboundedPrefetch } from './unbounded-prefetch.js';

/** Messages of Nest's RabbitMQ server (`RmqContext`): scoped as `rabbitmq <pattern> <Consumer.method>`. */
@Injectable()
export class RabbitMQTransport extends MessageTransport<RmqContext> {
  constructor(
    reflector: Reflector,
    modules: ModulesContainer,
    idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) moduleOptions: ProtocolModuleOptions,
    @Inject(RABBITMQ_OPTIONS) options: IdempotencyRabbitMQOptions,
    transports: IdempotencyTransports,
  ) {
    super(
      'rabbitmq',
      RmqContext,
      Transport.RMQ,
      reflector,
      modules,
      idempotency,
      moduleOptions,
      resolveConsumerOptions(options, { property: 'messageId' }),
    );
    transports.register(this);
    warnUnboundedPrefetch(modules, this.logger, this.concurrency);
  }

  protected deliveryOf(context: RmqContext): RabbitMQDelivery {
    return new RabbitMQDelivery(context);
  }
}
