import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { Observable } from 'rxjs';
import type { IdempotencyError, KeyTerms } from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyAttempt } from './idempotency-attempt.js';
import type { IdempotencyScope, StoredResponse } from './idempotency-store.interface.js';

/** A call a transport has read: what the protocol claims it by. A transport adds what it needs to answer it. */
export interface IdempotentCall {
  /** The protocol's options for the call's route (or pattern, or field). */
  policy: IdempotencyPolicy;
  scope: IdempotencyScope;
  fingerprint: string;
  /** How refusals name the call's key and what it was used with. */
  terms: KeyTerms;
  /**
   * How metrics and spans name the call's endpoint: the route template, broker pattern or operation name, never text
   * the client chose (an alias the client gave a field is in the scope, not in the label). Default: `scope.endpoint`.
   */
  endpointLabel?: string;
  /**
   * Whether the process holds the call until it is served (a consumer's message): claimed during shutdown's drain
   * too, until its wait is over. Default: false (a request that another instance may serve is refused meanwhile).
   */
  inHand?: boolean;
}

/** The calls a transport serves (`IdempotencyTransport.serves`). */
export interface ServedContexts {
  type: string;
  /** For `'rpc'`: the class of the calls' RPC context (`context.switchToRpc().getContext()`). */
  rpcContext?: abstract new (...args: never[]) => unknown;
}

/**
 * What a transport supplies for the protocol to serve its calls (one per kind of call, each the
 * same four jobs): read a call's key, account and fingerprint; answer with a stored outcome; run the handler under
 * its claim, capturing its outcome and ending the claim once; and render a refusal as its clients expect one.
 */
export interface IdempotencyTransport<Call extends IdempotentCall = IdempotentCall> {
  /**
   * The kind of call it serves, as the module's metrics and spans name it (`idempotency.transport`): the
   * protocol, the platform or the broker it serves. The protocol names none: `execute()`'s calls are `operation`.
   */
  readonly name: string;
  /**
   * Which calls are its own, by their context: its type (`context.getType()`) and, for `'rpc'`, the class of its RPC
   * context, since every message consumer's type is `'rpc'`, whichever the broker. Data, not a method: the protocol
   * picks a call's transport without entering any.
   */
  readonly serves: ServedContexts;
  /**
   * The call, or `undefined` to let it through unguarded (a route that is not idempotent, a safe method, no key where
   * none is required). A call that cannot be served is refused by throwing an `IdempotencyError`.
   */
  read(context: ExecutionContext): Promise<Call | undefined>;
  /**
   * How a call `read` let through runs. Default: as it is (`next.handle()`). A message consumer still settles the
   * message of an idempotent handler it runs unguarded (one without a key, where the application allows it).
   */
  letThrough?(context: ExecutionContext, next: CallHandler): Observable<unknown>;
  /**
   * Whether to claim the call again after a refusal that a later claim may get past (the store unavailable, the key
   * in progress, shutting down), once this resolves, rather than answer it with the refusal. Default: never (a client
   * retries on its own). A message consumer holds a message it cannot claim now, rather than give it back.
   */
  claimAgainAfter?(error: IdempotencyError, call: Call): Promise<boolean>;
  /**
   * The call was read, and serving it failed with an error that is none of the protocol's refusals (a store's bug):
   * the transport lets go of what it holds for it (a consumer gives its message back). The error goes on to Nest.
   */
  faulted?(call: Call, error: unknown): void;
  /** Answers the call with its stored outcome. */
  replay(call: Call, stored: StoredResponse): Observable<unknown> | Promise<Observable<unknown>>;
  /**
   * Runs the handler (`next`) within `attempt`, and ends it with the handler's outcome, saying whether it is final
   * (the transport's own rule); a refusal the end answers is the caller's instead.
   */
  run(call: Call, attempt: IdempotencyAttempt, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>>;
  /**
   * What the call's client gets for `error`: an error thrown into Nest's pipeline, or an Observable that answers for
   * it (a message consumer answers a refused event with nothing, having settled its message). `call` is undefined
   * when it was not read.
   */
  refusal(error: IdempotencyError, call: Call | undefined, context: ExecutionContext): unknown;
}
