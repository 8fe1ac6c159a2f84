import type { JsMsg } from '@nats-io/jetstream';
import type { MsgHdrs } from '@nats-io/transport-node';
import { BaseRpcContext } from '@nestjs/microservices';
import type { MessageDelivery } from '../messages/message-delivery.interface.js';

type JetStreamContextArgs = [message: JsMsg, delivery: MessageDelivery];

/**
 * The context of a message `JetStreamServer` delivers to a handler (`@Ctx()`): the JetStream message, its subject
 * (the handler's pattern), its headers, and its delivery, settled once: by the idempotency transport, by a handler
 * that settles it itself, or else by the server when the handler ends (ack, or nak on an error).
 */
export class JetStreamContext extends BaseRpcContext<JetStreamContextArgs> {
  getMessage(): JsMsg {
    return this.args[0];
  }

  getSubject(): string {
    return this.args[0].subject;
  }

  /** The pattern the handler was chosen by: the message's subject. */
  getPattern(): string {
    return this.args[0].subject;
  }

  getHeaders(): MsgHdrs | undefined {
    return this.args[0].headers;
  }

  /** The message's settlement (`ack`, `retryLater(delayMs)`, `reject`): the first call settles it, later ones do nothing. */
  getDelivery(): MessageDelivery {
    return this.args[1];
  }
}
