// The public API of `nest-idempotency/jetstream`: a Nest transport strategy that consumes a durable NATS JetStream
// consumer, and message consumers of it. It loads `@nestjs/microservices`, `@nats-io/transport-node` and
// `@nats-io/jetstream` (optional peer dependencies), which the main entry point does not.
export { JetStreamServer, type JetStreamServerEvents } from './jetstream-server.js';
export type { JetStreamServerOptions } from './jetstream-server-options.interface.js';
export { JetStreamContext } from './jetstream-context.js';
export { JetStreamClient, type JetStreamPublishOptions } from './jetstream-client.js';
export { REPLY_TO_HEADER, type JetStreamReply } from './jetstream-replies.js';
export { IdempotencyJetStreamModule } from './idempotency-jetstream.module.js';
export type { IdempotencyJetStreamOptions } from './idempotency-jetstream-options.interface.js';
export type { MessageConsumerOptions, MessageKeySource } from '../messages/message-options.interface.js';
export type { MessageDelivery } from '../messages/message-delivery.interface.js';
export { isFinalErrorByDefault } from '../messages/message-consumer-options.js';
