import type { RmqContext } from '@nestjs/microservices';
import type { MessageConsumerOptions } from '../messages/message-options.interface.js';

/**
 * Options of `IdempotencyRabbitMQModule.forRoot()`: where a message's key is (default: its AMQP `messageId`
 * property, `{ property: 'messageId' }`), what a message without one gets, and which handler errors are final.
 */
export type IdempotencyRabbitMQOptions = MessageConsumerOptions<RmqContext>;
