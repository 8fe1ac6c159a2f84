// The public API of `nest-idempotency/rabbitmq`: message consumers of Nest's RabbitMQ server. It loads
// `@nestjs/microservices` (an optional peer dependency), which the main entry point does not.
export { IdempotencyRabbitMQModule } from './idempotency-rabbitmq.module.js';
export type { IdempotencyRabbitMQOptions } from './idempotency-rabbitmq-options.interface.js';
export type { MessageConsumerOptions, MessageKeySource } from '../messages/message-options.interface.js';
export { isFinalErrorByDefault } from '../messages/message-consumer-options.js';
export type { MessageDelivery } from '../messages/message-delivery.interface.js';
