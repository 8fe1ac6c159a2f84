import { type CallHandler, type ExecutionContext, Logger, type Type } from '@nestjs/common';
import type { ModulesContainer, Reflector } from '@nestjs/core';
import { type BaseRpcContext, RpcException, type Transport } from '@nestjs/microservices';
import { PATTERN_HANDLER_METADATA, PATTERN_METADATA } from '@nestjs/microservices/constants.js';
import { PatternHandler } from '@nestjs/microservices/enums/pattern-handler.enum.js';
import { lastValueFrom, Observable } from 'rxjs';
import { resolveAccount } from '../transport-kit/account-resolution.js';
import { jsonFingerprint } from '../transport-kit/json-fingerprint.js';
import { runUnguarded } from '../protocol/current-run.js';
import { HandlerPlans } from '../transport-kit/handler-plans.js';
import {
  type IdempotencyError,
  IdempotencyAccountUnresolvedError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
  IdempotencyShuttingDownError,
  type KeyTerms,
} from '../protocol/idempotency.errors.js';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import { type IdempotencyPolicy, resolvePolicy } from '../protocol/idempotency-policy.js';
import type { IdempotencyAttempt } from '../protocol/idempotency-attempt.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import type {
  IdempotentCall,
  IdempotencyTransport,
  ServedContexts,
} from '../protocol/idempotency-transport.interface.js';
import type { IdempotencyService } from '../protocol/idempotency.service.js';
import { keyFault } from '../protocol/scope-values.js';
import { describedValue } from '../protocol/described-value.js';
import type { MessageDelivery } from './message-delivery.interface.js';
import { type MessageOutcome, outcomeOf, storableError, storedOutcome } from './message-outcomes.js';
import { type ResolvedConsumerOptions, keyNameOf } from './message-consumer-options.js';
import { SettledOnce } from './settled-once.js';
import { MessageSettlement } from './message-settlement.js';
import { GivenBackAtShutdown, MessagesInHand } from './messages-in-hand.js';
import { idempotentEventHandlersByPattern, patternKey } from './idempotent-message-handlers.js';
import { drainBeforeServersClose } from './drain-before-server-close.js';
import { type AnsweredMessage, MessageAnswers } from './message-answers.js';

/** What a message transport knows of an idempotent handler once. */
interface MessagePlan {
  policy: IdempotencyPolicy;
  /** `@MessagePattern()`: its caller waits for a reply. `@EventPattern()`: nobody does. */
  request: boolean;
  /** Who consumes: two handlers of one message each process it once. */
  consumer: string;
  /** How metrics name its messages: its handler's pattern (a wildcard's, not the routing key a publisher chose). */
  endpointLabel: string;
}

/** An idempotent message, as read by one of its handlers. */
interface MessageCall extends IdempotentCall {
  plan: MessagePlan;
  /** The message's delivery as this handler settles it. */
  delivery: MessageDelivery;
  /** Ends this handler's turn among the messages claimed and run at once. */
  endTurn: () => void;
  /** Since when the message has been held, claimed again after refusals that a later claim may get past. */
  held?: { since: number; claims: number };
}

/** The longest pause between two claims of a held message: a store back is noticed within it. */
const MAX_HOLD_PAUSE_MS = 10_000;

/**
 * What consumers do by default where HTTP's defaults do not suit them. They wait for a duplicate's attempt in flight
 * (within `inFlightWaitSeconds`) before they give its message back: a short first attempt then costs the duplicate no
 * delivery, and a long one ties up a prefetch slot no longer than that. Their lease is short (renewed every third of
 * it while the handler runs): after a crash in standard mode, its redeliveries find the key in progress until the
 * lease lapses, and each costs a delivery of the queue's limit (a quorum queue's `x-delivery-limit`).
 */
const CONSUMER_DEFAULTS = { inFlight: 'wait', leaseSeconds: 15 } as const;

/** Messages claimed and run at once with a store that does not say its capacity. */
const DEFAULT_CONCURRENCY = 10;

/**
 * A message consumer's transport, whichever the broker (each broker's room says how its context is recognized, where
 * a message's pattern, properties and headers are, and how it is settled). The message's key is where the application
 * said; its fingerprint is its payload; its scope is (account, broker, pattern and consumer, key). The message is
 * acknowledged once its outcome is stored (or replayed), given back to the broker to be redelivered later when its
 * attempt failed or could not claim, and rejected (dead-lettered) when it can never be run.
 */
/** A broker's RPC context, as Nest's server hands it to a handler: with the pattern the handler was chosen by. */
type PatternedContext = BaseRpcContext & { getPattern(): string };

export abstract class MessageTransport<Context extends PatternedContext> implements IdempotencyTransport<MessageCall> {
  protected readonly logger = new Logger('Idempotency');
  private readonly answers = new MessageAnswers(this.logger);
  private readonly plans: HandlerPlans<MessagePlan>;
  /**
   * Each message's settlement among its handlers, whichever of `run`, `replay`, `refusal` or `letThrough` settles
   * each handler's view of it.
   */
  private readonly settlements = new WeakMap<object, MessageSettlement>();
  private readonly warnedWithoutKey = new Set<string>();
  private readonly warnedAbsent = new Set<string>();
  private readonly inHand: MessagesInHand;
  readonly serves: ServedContexts;
  /** The idempotent event handlers of each pattern, read from the application's controllers at the first message. */
  private eventHandlers?: Map<string, ReadonlySet<string>>;

  protected constructor(
    /** How scopes, logs and metrics name the broker, e.g. `rabbitmq`. */
    readonly name: string,
    contextClass: Type<Context>,
    /** Nest's built-in transport of the broker (its handlers' `@EventPattern(pattern, transport)`), if any. */
    private readonly nestTransport: Transport | undefined,
    private readonly reflector: Reflector,
    private readonly modules: ModulesContainer,
    private readonly idempotency: IdempotencyService,
    moduleOptions: ProtocolModuleOptions,
    private readonly options: ResolvedConsumerOptions<Context>,
  ) {
    this.serves = { type: 'rpc', rpcContext: contextClass };
    this.plans = new HandlerPlans(reflector, (handlerOptions, context) => {
      const consumer = `${context.getClass().name}.${context.getHandler().name}`;
      const [pattern] = [Reflect.getMetadata(PATTERN_METADATA, context.getHandler()) as unknown].flat();
      return {
        policy: resolvePolicy(moduleOptions, handlerOptions, CONSUMER_DEFAULTS),
        request: Reflect.getMetadata(PATTERN_HANDLER_METADATA, context.getHandler()) === PatternHandler.MESSAGE,
        consumer,
        endpointLabel: `${name} ${patternKey(pattern)} ${consumer}`,
      };
    });
    this.inHand = new MessagesInHand(options.concurrency ?? idempotency.storeCapacity ?? DEFAULT_CONCURRENCY);
    idempotency.addDrainParticipant(this.inHand);
    drainBeforeServersClose(modules, idempotency);
  }

  /** Messages claimed and run at once by this transport (`concurrency`). */
  protected get concurrency(): number {
    return this.inHand.concurrency;
  }

  /** The message's delivery: its properties and headers, and how it is settled. */
  protected abstract deliveryOf(context: Context): MessageDelivery;

  async read(context: ExecutionContext): Promise<MessageCall | undefined> {
    const plan = this.plans.planFor(context);
    if (!plan) return undefined;
    const rpc = context.switchToRpc();
    const [payload, messageContext] = [rpc.getData<unknown>(), rpc.getContext<Context>()];
    const delivery = this.deliveryFor(context, plan.consumer);
    const keyName = keyNameOf(this.options.key);
    const pattern = messageContext.getPattern();
    const key = this.keyOf(payload, messageContext, delivery, keyName);
    if (key === undefined) {
      if (this.options.withoutKey === 'reject') throw new IdempotencyKeyRequiredError(keyName);
      this.warnRunWithoutKey(pattern, keyName);
      return undefined;
    }
    const fault = keyFault(key);
    if (fault !== undefined) throw new IdempotencyKeyInvalidError(keyName, fault);
    const { policy } = plan;
    const account = await resolveAccount(context, policy, {
      isAnswer: (error) => error instanceof RpcException,
      unresolved: (reason) => {
        this.logger.error(`The accountResolver gave no account for a message to ${plan.consumer}: ${reason}.`);
        return new IdempotencyAccountUnresolvedError();
      },
    }).catch((error: unknown) => {
      // The resolver's own answer (an RpcException), thrown on to a request's caller: it refused the message for
      // good, which is rejected (dead-lettered) like any refusal that never succeeds; left unsettled, it would hold
      // its prefetch slot until the channel closed, and then be redelivered to the same answer.
      if (error instanceof RpcException) {
        this.logger.warn(`A message to ${plan.consumer} was rejected: the accountResolver answered ${error.message}`);
        delivery.reject();
      }
      throw error;
    });
    const endTurn = await this.inHand.admitted().catch((error: unknown) => {
      if (error instanceof GivenBackAtShutdown) throw new IdempotencyShuttingDownError(policy.retryAfterSeconds);
      throw error;
    });
    return {
      plan,
      policy,
      scope: { account, endpoint: `${this.name} ${pattern} ${plan.consumer}`, key },
      endpointLabel: plan.endpointLabel,
      fingerprint: jsonFingerprint(payload),
      terms: { key: keyName, usedWith: 'payload' } satisfies KeyTerms,
      inHand: true,
      delivery,
      endTurn,
    };
  }

  /**
   * A message that cannot be claimed now, but may be later (the store unavailable or out of transaction slots, its
   * key in progress in another attempt), is held, unsettled, and claimed again after a pause that doubles from
   * `retryAfterSeconds` (up to 10 s), for up to `holdSeconds`: giving it back would spend one of its deliveries for
   * a fault that is not its own. Past that bound, or once shutdown's drain is over, it is given back.
   */
  async claimAgainAfter(error: IdempotencyError, call: MessageCall): Promise<boolean> {
    if (error.retryAfterSeconds === undefined) return false;
    const { policy, scope } = call;
    const held = (call.held ??= { since: Date.now(), claims: 0 });
    if (Date.now() - held.since >= this.options.holdSeconds * 1000) {
      this.logger.warn(
        `A message to ${scope.endpoint} (key ${JSON.stringify(scope.key)}) could not be claimed for ` +
          `holdSeconds (${this.options.holdSeconds} s): it is given back to the broker (${error.code}).`,
      );
      return false;
    }
    if (held.claims === 0 && error.code !== 'idempotency_shutting_down') {
      this.logger.warn(
        `A message to ${scope.endpoint} (key ${JSON.stringify(scope.key)}) cannot be claimed now (${error.code}): ` +
          `the consumer holds it and claims it again, for up to ${this.options.holdSeconds} s.`,
      );
    }
    const pauseMs = Math.min(policy.retryAfterSeconds * 1000 * 2 ** held.claims, MAX_HOLD_PAUSE_MS);
    held.claims += 1;
    return this.inHand.pause(pauseMs);
  }

  /** Serving the message failed unexpectedly: its turn ends, and it goes back to the broker, as after a failed run. */
  faulted(call: MessageCall, error: unknown): void {
    call.endTurn();
    this.answers.redelivered(
      answeredAs(call.plan, call.delivery, call.scope.endpoint),
      call.policy.retryAfterSeconds,
      error,
    );
  }

  /** A stored outcome: the message is done, and a waiting caller gets the same reply (or error) as the first. */
  replay({ plan, delivery, endTurn }: MessageCall, stored: StoredResponse): Observable<unknown> {
    endTurn();
    return this.answers.acknowledged(answeredAs(plan, delivery, plan.consumer), outcomeOf(stored), false);
  }

  async run(call: MessageCall, attempt: IdempotencyAttempt, next: CallHandler): Promise<Observable<unknown>> {
    try {
      return await this.runClaimed(call, attempt, next);
    } finally {
      call.endTurn();
    }
  }

  private async runClaimed(
    call: MessageCall,
    attempt: IdempotencyAttempt,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    const { plan, policy, delivery, scope } = call;
    let ended = await this.handled(next, attempt);
    // An event's value reaches nobody: only that it ran is stored.
    if (ended.status === 'done' && !plan.request) ended = { status: 'done', value: undefined };
    let outcome = this.finalOutcome(ended);
    let response: StoredResponse | undefined;
    try {
      response = outcome && storedOutcome(outcome);
    } catch (error) {
      // A reply that is not JSON (a cycle, a BigInt), which Nest could not send either: the handler's work is done, so
      // its failure to answer is its final outcome, which a redelivery gets again rather than run the handler again.
      outcome = { kind: 'error', error: storableError(error) };
      response = storedOutcome(outcome);
    }
    // The consumer's own rule says what is final (an error stored as 422 too), never HTTP's `isFinalStatus`.
    const refused = await attempt.end({ response, failed: ended.status === 'failed', final: outcome !== undefined });
    // A refusal (the outcome could not be committed) goes to `refusal`, which settles the message.
    if (refused) throw refused;
    const answered = answeredAs(plan, delivery, scope.endpoint);
    if (!outcome) return this.answers.redelivered(answered, policy.retryAfterSeconds, (ended as FailedEnd).error);
    return this.answers.acknowledged(answered, outcome, true);
  }

  /** An idempotent handler run without a key (`withoutKey: 'run'`): its message is settled as a guarded one's. */
  letThrough(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const plan = this.plans.planFor(context);
    if (!plan) return next.handle();
    const delivery = this.deliveryFor(context, plan.consumer);
    return new Observable<unknown>((subscriber) => {
      void this.handled(next).then((ended) => {
        const outcome = this.finalOutcome(ended);
        const answered = answeredAs(plan, delivery, plan.consumer);
        const answer = outcome
          ? this.answers.acknowledged(answered, outcome, true)
          : this.answers.redelivered(answered, plan.policy.retryAfterSeconds, (ended as FailedEnd).error);
        answer.subscribe(subscriber);
      });
    });
  }

  /** A refusal settles the message as `MessageAnswers.refused` says, and answers its handler. */
  refusal(error: IdempotencyError, call: MessageCall | undefined, context: ExecutionContext): unknown {
    call?.endTurn();
    const plan = call?.plan ?? this.plans.planFor(context);
    const delivery = call?.delivery ?? this.deliveryFor(context, plan?.consumer ?? '');
    const where = call?.scope.endpoint ?? `${this.name} ${context.switchToRpc().getContext<Context>().getPattern()}`;
    return this.answers.refused({ request: plan?.request ?? false, delivery, where }, error);
  }

  /**
   * The message's delivery as `consumer`, one of its idempotent handlers, settles it. The first of its handlers to
   * read it takes it in hand, expecting a settlement from each idempotent handler of its pattern.
   */
  private deliveryFor(context: ExecutionContext, consumer: string): MessageDelivery {
    const messageContext = context.switchToRpc().getContext<Context>();
    let settlement = this.settlements.get(messageContext);
    if (!settlement) {
      const delivery = new SettledOnce(this.deliveryOf(messageContext), this.logger);
      this.eventHandlers ??= idempotentEventHandlersByPattern(this.modules, this.reflector, this.nestTransport);
      const expected = this.eventHandlers.get(patternKey(messageContext.getPattern())) ?? new Set<string>();
      const taken: MessageSettlement = new MessageSettlement(
        delivery,
        expected,
        () => this.inHand.settled(taken),
        (absent) => this.warnAbsentHandlers(absent),
      );
      settlement = taken;
      this.settlements.set(messageContext, settlement);
      this.inHand.taken(settlement, delivery.consumer);
    }
    return settlement.of(consumer);
  }

  /** The message's key, `undefined` when it has none; one the key function cannot give is invalid. */
  private keyOf(payload: unknown, context: Context, delivery: MessageDelivery, keyName: string): string | undefined {
    const { key } = this.options;
    if (typeof key !== 'function') {
      return 'property' in key ? delivery.property(key.property) : delivery.header(key.header);
    }
    let found: unknown;
    try {
      found = key(payload, context);
    } catch (error) {
      throw new IdempotencyKeyInvalidError(keyName, `the key function threw ${error}`);
    }
    if (found === undefined || typeof found === 'string') return found;
    throw new IdempotencyKeyInvalidError(keyName, `the key function returned ${describedValue(found)}, not a string`);
  }

  /** Runs the handler's pipeline to its end, within `run` (unguarded without one): its last value, or its error. */
  private async handled(next: CallHandler, attempt?: IdempotencyAttempt): Promise<HandlerEnd> {
    const pipeline = new Observable((subscriber) => {
      const subscribe = () => next.handle().subscribe(subscriber);
      return attempt ? attempt.within(subscribe) : runUnguarded(subscribe);
    });
    try {
      return { status: 'done', value: await lastValueFrom(pipeline, { defaultValue: undefined }) };
    } catch (error) {
      return { status: 'failed', error };
    }
  }

  /** The outcome to store, or `undefined` when the handler failed in a way a redelivery may get past (a fault). */
  private finalOutcome(ended: HandlerEnd): MessageOutcome | undefined {
    if (ended.status === 'done') return { kind: 'value', value: ended.value };
    return this.options.isFinalError(ended.error) ? { kind: 'error', error: storableError(ended.error) } : undefined;
  }

  /** Handlers of a message expected to settle it that never ran (a guard refused them), warned of once each. */
  private warnAbsentHandlers(absent: string[]): void {
    const unwarned = absent.filter((consumer) => !this.warnedAbsent.has(consumer));
    if (unwarned.length === 0) return;
    for (const consumer of unwarned) this.warnedAbsent.add(consumer);
    this.logger.warn(
      `The idempotent handler(s) ${unwarned.join(', ')} of a message did not run (refused before the module's ` +
        'interceptor, by a guard say): the message was settled by the outcomes of its other handlers.',
    );
  }

  private warnRunWithoutKey(pattern: string, keyName: string): void {
    if (this.warnedWithoutKey.has(pattern)) return;
    this.warnedWithoutKey.add(pattern);
    this.logger.warn(
      `Messages to ${this.name} ${pattern} without a key (${keyName}) run unguarded (withoutKey: 'run'): a ` +
        'redelivery of one runs its handler again.',
    );
  }
}

type FailedEnd = { status: 'failed'; error: unknown };
type HandlerEnd = { status: 'done'; value: unknown } | FailedEnd;

/** A handler's view of its message, as `MessageAnswers` settles and answers it. */
function answeredAs(plan: MessagePlan, delivery: MessageDelivery, where: string): AnsweredMessage {
  return { request: plan.request, delivery, where };
}
