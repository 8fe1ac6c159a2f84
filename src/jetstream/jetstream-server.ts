import { EventEmitter } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { type Consumer, type ConsumerMessages, jetstream, jetstreamManager, type JsMsg } from '@nats-io/jetstream';
import { connect, type NatsConnection, type Status } from '@nats-io/transport-node';
import { Logger } from '@nestjs/common';
import { type CustomTransportStrategy, type MessageHandler, Server } from '@nestjs/microservices';
import type { MessageConsumer } from '../messages/message-delivery.interface.js';
import { SettledOnce } from '../messages/settled-once.js';
import { JetStreamContext } from './jetstream-context.js';
import { JetStreamDelivery } from './jetstream-delivery.js';
import { provision } from './jetstream-provisioning.js';
import { encodedReply, type JetStreamReply, REPLY_TO_HEADER } from './jetstream-replies.js';
import type { JetStreamServerOptions } from './jetstream-server-options.interface.js';

/** The connection's events `on()` subscribes to, as NATS reports them. */
export type JetStreamServerEvents = {
  disconnect: (status: Status) => void;
  reconnect: (status: Status) => void;
  error: (status: Status) => void;
};

type JetStreamServerStatus = 'connected' | 'disconnected';

/** How long one pull request waits for messages before the next: short enough that a closed pull is soon noticed. */
const PULL_EXPIRES_MS = 5_000;
/** The pause before pulling again after a pull failed (the consumer missing, the connection down). */
const PULL_RETRY_MS = 1_000;

/**
 * A Nest transport strategy that consumes a durable JetStream pull consumer (Nest's NATS transport is core NATS: no
 * acknowledgements, no redelivery). Each message goes to the handler whose pattern is its subject, with its JSON
 * payload and a `JetStreamContext`; one with a `Nest-Reply-To` header is a request, whose handler's reply is
 * published to that subject. A message no one else settled is acknowledged when its handler ends, or given back
 * (nak) when it fails. Messages are pulled only while fewer than `maxInFlight` run, so that an instance busy with
 * its own leaves the others to the consumer's other instances.
 */
export class JetStreamServer
  extends Server<JetStreamServerEvents, JetStreamServerStatus>
  implements CustomTransportStrategy
{
  readonly transportId = Symbol('JETSTREAM');
  protected readonly logger = new Logger(JetStreamServer.name);
  private connection?: NatsConnection;
  private readonly events = new EventEmitter();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly stopping = new AbortController();
  private readonly stopped = new Promise<void>((resolve) =>
    this.stopping.signal.addEventListener('abort', () => resolve()),
  );
  private pulling?: Promise<void>;
  /** Stopped by shutdown's drain: no more pulls; the messages pulled run and are settled. */
  private readonly pullsStopped = new AbortController();
  /** This server's consumer, as its messages' deliveries name it. */
  private readonly consumer: MessageConsumer = {
    stop: async () => {
      this.pullsStopped.abort();
      await this.pulling;
    },
  };
  private batch?: ConsumerMessages;
  /** How often a running message is reported `working()`: half the consumer's shortest ack wait. */
  private heartbeatMs = 15_000;

  constructor(private readonly options: JetStreamServerOptions) {
    super();
  }

  async listen(callback: (error?: unknown) => void): Promise<void> {
    const { stream, durable } = this.options;
    try {
      this.connection = await connect({
        ...this.options.connection,
        servers: this.options.servers ?? 'nats://127.0.0.1:4222',
      });
      void this.reportStatus(this.connection);
      await provision(await jetstreamManager(this.connection), this.options);
      const consumer = await jetstream(this.connection).consumers.get(stream, durable);
      const { config } = await consumer.info();
      // In nanoseconds; with a backoff, each delivery's ack wait is its entry (JetStream's default: 30 s).
      this.heartbeatMs = Math.max(Math.min(config.ack_wait ?? 30e9, ...(config.backoff ?? [])) / 2e6, 100);
      this.pulling = this.pull(consumer);
      this._status$.next('connected');
      callback();
    } catch (error) {
      await this.connection?.close();
      this.connection = undefined;
      callback(error);
    }
  }

  /** Stops pulling, lets the handlers in flight finish (within `closeTimeoutMs`), then drains the connection. */
  async close(): Promise<void> {
    const connection = this.connection;
    if (!connection) return;
    this.connection = undefined;
    this.stopping.abort();
    this.batch?.stop();
    await this.pulling;
    const timeoutMs = this.options.closeTimeoutMs ?? 10_000;
    const finished = Promise.all(this.inFlight).then(() => true);
    if (!(await Promise.race([finished, delay(timeoutMs, false, { ref: false })]))) {
      this.logger.warn(
        `${this.inFlight.size} message(s) still ran after ${timeoutMs} ms: closing without them (JetStream ` +
          'redelivers what was not acknowledged)',
      );
    }
    await connection.drain();
    this.events.removeAllListeners();
  }

  on<EventKey extends keyof JetStreamServerEvents>(event: EventKey, callback: JetStreamServerEvents[EventKey]): void {
    this.events.on(event, callback);
  }

  unwrap<T = NatsConnection>(): T {
    if (!this.connection) throw new Error('JetStreamServer is not listening: call listen() before unwrap()');
    return this.connection as T;
  }

  private async pull(consumer: Consumer): Promise<void> {
    const { signal } = this.stopping;
    const maxInFlight = this.options.maxInFlight ?? 10;
    // A pull under way when the drain stops the pulls runs out (within PULL_EXPIRES_MS): what it brings is run, not
    // dropped, which JetStream would redeliver after its ack wait, counting a delivery.
    while (!signal.aborted && !this.pullsStopped.signal.aborted) {
      if (this.inFlight.size >= maxInFlight) {
        await Promise.race([...this.inFlight, this.stopped]);
        continue;
      }
      try {
        this.batch = await consumer.fetch({ max_messages: maxInFlight - this.inFlight.size, expires: PULL_EXPIRES_MS });
        if (signal.aborted) this.batch.stop();
        for await (const message of this.batch) this.dispatch(message);
      } catch (error) {
        if (signal.aborted) break;
        this.logger.error(`Could not pull from ${this.options.stream} ${this.options.durable}: ${error}`);
        await delay(PULL_RETRY_MS, undefined, { signal }).catch(() => undefined);
      }
    }
  }

  private dispatch(message: JsMsg): void {
    // Pulled as the server closed: given back at once, for another instance.
    if (this.stopping.signal.aborted) return message.nak();
    const handled = this.handle(message).finally(() => this.inFlight.delete(handled));
    this.inFlight.add(handled);
  }

  private async handle(message: JsMsg): Promise<void> {
    const delivery = new JetStreamDelivery(message, this.consumer);
    const context = new JetStreamContext([message, new SettledOnce(delivery, this.logger)]);
    const settlement = context.getDelivery();
    const replyTo = message.headers?.get(REPLY_TO_HEADER) || undefined;
    const handler = this.getHandlerByPattern(message.subject);
    const payload = handler ? payloadOf(message) : { fault: `no handler has the pattern ${message.subject}` };
    if (!handler || 'fault' in payload) {
      // Never to be handled here: terminated, and its caller told.
      const { fault } = payload as { fault: string };
      this.logger.error(`A message to ${message.subject} was terminated: ${fault}`);
      settlement.reject();
      if (replyTo) this.reply(replyTo, { err: { status: 'error', message: fault } });
      return;
    }
    const heartbeat = setInterval(() => message.working(), this.heartbeatMs);
    try {
      const reply = await this.replyOf(handler, payload.value, context, delivery.givenBack);
      // Given back (by the idempotency transport): a later delivery answers.
      if (reply === undefined) return;
      // The reply before the settlement: a crash between the two redelivers the request, whose record answers it again.
      if (replyTo) this.reply(replyTo, reply);
      delivery.replied();
      if ('err' in reply) settlement.retryLater(0);
      else settlement.ack();
    } finally {
      clearInterval(heartbeat);
    }
  }

  /**
   * Runs the handler within Nest's processing hooks, to the end of what it returns: its last value, or its error
   * (as the exception filters made it); `undefined` once the message is given back, which ends the wait for a reply
   * that this delivery will not send.
   */
  private replyOf(
    handler: MessageHandler,
    payload: unknown,
    context: JetStreamContext,
    givenBack: Promise<void>,
  ): Promise<JetStreamReply | undefined> {
    return new Promise((resolve) => {
      this.runWithProcessingHooks(context, async (runEndHook) => {
        const end = (reply: JetStreamReply | undefined) => {
          runEndHook();
          resolve(reply);
        };
        try {
          let last: unknown;
          const subscription = this.transformToObservable(await handler(payload, context)).subscribe({
            next: (value: unknown) => {
              last = value;
            },
            error: (err: unknown) => end({ err }),
            complete: () => end({ response: last }),
          });
          void givenBack.then(() => {
            subscription.unsubscribe();
            end(undefined);
          });
        } catch (err) {
          end({ err });
        }
      });
    });
  }

  private reply(subject: string, reply: JetStreamReply): void {
    try {
      this.connection?.publish(subject, encodedReply(reply));
    } catch (error) {
      this.logger.error(`Could not publish a reply to ${subject}: ${error}`);
    }
  }

  private async reportStatus(connection: NatsConnection): Promise<void> {
    for await (const status of connection.status()) {
      if (status.type === 'disconnect' || status.type === 'error') {
        this.logger.error(`NATS ${status.type}: ${JSON.stringify(status)}`);
        if (status.type === 'disconnect') this._status$.next('disconnected');
      } else if (status.type === 'reconnect') {
        this.logger.log('NATS reconnected');
        this._status$.next('connected');
      }
      this.events.emit(status.type, status);
    }
  }
}

/** A message's JSON payload (`undefined` for an empty one), or why it has none. */
function payloadOf(message: JsMsg): { value: unknown } | { fault: string } {
  if (message.data.length === 0) return { value: undefined };
  try {
    return { value: JSON.parse(Buffer.from(message.data).toString('utf8')) };
  } catch (error) {
    return { fault: `its payload is not JSON (${(error as Error).message})` };
  }
}
