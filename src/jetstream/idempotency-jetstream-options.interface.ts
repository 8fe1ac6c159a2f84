import type { MessageConsumerOptions } from '../messages/message-options.interface.js';
import type { JetStreamContext } from './jetstream-context.js';

/**
 * Options of `IdempotencyJetStreamModule.forRoot()`: where a message's key is (default: its `Nats-Msg-Id` header,
 * `{ header: 'Nats-Msg-Id' }`; JetStream messages have headers, not properties), what a message without one gets,
 * and which handler errors are final.
 */
export type IdempotencyJetStreamOptions = Omit<MessageConsumerOptions<JetStreamContext>, 'key'> & {
  key?: { header: string } | ((payload: unknown, context: JetStreamContext) => string | undefined);
};
