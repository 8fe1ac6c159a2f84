import { jetstream, type JetStreamClient as NatsJetStreamClient, type PubAck } from '@nats-io/jetstream';
import { createInbox, headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { decodedReply, REPLY_TO_HEADER } from './jetstream-replies.js';

export interface JetStreamPublishOptions {
  /** The message's `Nats-Msg-Id` header: the stream keeps one message per id within its duplicate window. */
  msgId?: string;
  /** More headers. */
  headers?: Record<string, string>;
}

/**
 * Publishes what `JetStreamServer` consumes, on a connection of the caller's: events (`emit`) and requests
 * (`send`), their payload as JSON, their key in `Nats-Msg-Id`.
 */
export class JetStreamClient {
  private readonly js: NatsJetStreamClient;

  constructor(private readonly connection: NatsConnection) {
    this.js = jetstream(connection);
  }

  /** Publishes an event to the stream that has `subject`; resolves once the stream has stored it. */
  emit(subject: string, payload: unknown, options: JetStreamPublishOptions = {}): Promise<PubAck> {
    return this.publish(subject, payload, options);
  }

  /**
   * Sends a request: published to the stream with a new inbox in its `Nest-Reply-To` header, it resolves with the
   * handler's reply (or rejects with its error) within `timeoutMs`. A request the stream stored already (the same
   * `msgId` within its duplicate window) is refused at once: the stream drops it, and the first one's reply went to
   * the first one's inbox.
   */
  async send<T = unknown>(
    subject: string,
    payload: unknown,
    options: JetStreamPublishOptions & { timeoutMs?: number } = {},
  ): Promise<T> {
    const inbox = createInbox();
    const replies = this.connection.subscribe(inbox, { max: 1, timeout: options.timeoutMs ?? 30_000 });
    try {
      const stored = await this.publish(subject, payload, {
        ...options,
        headers: { ...options.headers, [REPLY_TO_HEADER]: inbox },
      });
      if (stored.duplicate) {
        throw new Error(
          `The stream ${stored.stream} dropped a request to ${subject} as a duplicate of msgId ${options.msgId}: ` +
            'its reply went to the first request',
        );
      }
      for await (const message of replies) {
        const reply = decodedReply(message.data);
        if ('err' in reply) throw reply.err;
        return reply.response as T;
      }
      throw new Error(`No reply to a request to ${subject}: the connection closed`);
    } finally {
      replies.unsubscribe();
    }
  }

  private publish(subject: string, payload: unknown, options: JetStreamPublishOptions): Promise<PubAck> {
    const headers = natsHeaders();
    for (const [name, value] of Object.entries(options.headers ?? {})) headers.set(name, value);
    return this.js.publish(subject, payload === undefined ? undefined : JSON.stringify(payload), {
      headers,
      ...(options.msgId === undefined ? {} : { msgID: options.msgId }),
    });
  }
}
