import { type CallHandler, type ExecutionContext, HttpException, Inject, Injectable, Logger } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { GraphQLError } from 'graphql';
import { lastValueFrom, Observable, of, throwError } from 'rxjs';
import { resolveAccount } from '../transport-kit/account-resolution.js';
import { jsonFingerprint } from '../transport-kit/json-fingerprint.js';
import { HandlerPlans } from '../transport-kit/handler-plans.js';
import {
  type IdempotencyError,
  IdempotencyAccountUnresolvedError,
  IdempotencyKeyInvalidError,
  IdempotencyKeyRequiredError,
} from '../protocol/idempotency.errors.js';
import type { ProtocolIdempotentOptions, ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import { type FinalStatusOptions, finalStatusRule } from '../transport-kit/final-statuses.js';
import { type IdempotencyPolicy, resolvePolicy } from '../protocol/idempotency-policy.js';
import type { IdempotencyAttempt } from '../protocol/idempotency-attempt.js';
import type { StoredResponse } from '../protocol/idempotency-store.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from '../protocol/idempotency.tokens.js';
import type { IdempotentCall, IdempotencyTransport } from '../protocol/idempotency-transport.interface.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { IdempotencyTransports } from '../protocol/idempotency-transports.js';
import { parseIdempotencyKey } from '../transport-kit/key-header.js';
import { keyFault, scopeTextFault } from '../protocol/scope-values.js';
import { nonEmptyString, boolean } from '../protocol/option-checks.js';
import { type GraphqlField, graphqlFieldOf, isRootMutationField } from './graphql-field.js';
import { outcomeOf, storedException, storedValue } from './graphql-outcomes.js';
import { GraphqlRefusal } from './graphql-refusals.js';
import type { IdempotencyGraphQLOptions } from './idempotency-graphql-options.interface.js';
import { GRAPHQL_OPTIONS } from './idempotency-graphql.module-definition.js';

/** What the transport knows of an idempotent resolver once: its policy, and which of its exceptions are final. */
interface GraphqlPlan {
  policy: IdempotencyPolicy;
  isFinalStatus: (status: number) => boolean;
}

/** An idempotent root mutation field, as read. */
interface GraphqlCall extends IdempotentCall {
  plan: GraphqlPlan;
}

/**
 * The HTTP routes' options among `IdempotencyModule`'s that GraphQL, served over HTTP, shares: a request's header
 * defaults to theirs, and an `HttpException`'s status is final by the same rule.
 */
interface HttpSharedOptions extends FinalStatusOptions {
  headerName?: string;
}

/**
 * The GraphQL transport: `@Idempotent()` root fields of mutations (`@Mutation()` resolvers), one record per field.
 * The key is the field's `keyArgument`, or the request's header; the fingerprint the field's arguments (not the
 * document, so that selections do not change it); the scope `(account, graphql Mutation.<field>, key)`, and with the
 * header's key, which every field of the document shares, the field's response key (its alias) besides. A replay is
 * the field's stored result, to which GraphQL applies the replay's own selection set. Other fields (queries, field
 * resolvers of a resolver class marked as a whole) pass: a method marked on its own is refused at start-up
 * (`idempotent-resolvers.ts`).
 */
@Injectable()
export class GraphqlTransport implements IdempotencyTransport<GraphqlCall> {
  readonly name = 'graphql';
  private readonly logger = new Logger('Idempotency');
  private readonly plans: HandlerPlans<GraphqlPlan, ProtocolIdempotentOptions & FinalStatusOptions>;
  private readonly keyArgument: string | undefined;
  private readonly headerName: string;
  private readonly required: boolean;

  constructor(
    reflector: Reflector,
    private readonly idempotency: IdempotencyService,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) moduleOptions: ProtocolModuleOptions & HttpSharedOptions,
    @Inject(GRAPHQL_OPTIONS) options: IdempotencyGraphQLOptions,
    transports: IdempotencyTransports,
  ) {
    this.keyArgument =
      options.keyArgument === undefined ? undefined : nonEmptyString('keyArgument', options.keyArgument);
    this.headerName = nonEmptyString('headerName', options.headerName ?? moduleOptions.headerName ?? 'Idempotency-Key');
    this.required = boolean('required', options.required ?? false);
    this.plans = new HandlerPlans(reflector, (handlerOptions) => ({
      policy: resolvePolicy(moduleOptions, handlerOptions),
      isFinalStatus: finalStatusRule(moduleOptions, handlerOptions),
    }));
    transports.register(this);
  }

  readonly serves = { type: 'graphql' };

  async read(context: ExecutionContext): Promise<GraphqlCall | undefined> {
    const plan = this.plans.planFor(context);
    if (!plan) return undefined;
    const { policy } = plan;
    const field = graphqlFieldOf(context);
    if (!isRootMutationField(field)) return undefined;
    const found = this.keyOf(field);
    if (!found) {
      if (this.required) throw new IdempotencyKeyRequiredError(this.keyName());
      return undefined;
    }
    const { key, fromHeader } = found;
    const { fieldName, path } = field.info;
    const responseKey = String(path.key);
    // Under the header's one key, each aliased field has a record of its own: the alias is part of its scope, but not of
    // its metrics' label (an alias is the client's text, and would make a series of each).
    const label = `graphql Mutation.${fieldName}`;
    const endpoint = `${label}${fromHeader && responseKey !== fieldName ? ` as ${responseKey}` : ''}`;
    // The alias is the client's text: one the records table cannot hold is the client's to shorten.
    const aliasFault = scopeTextFault(endpoint);
    if (aliasFault !== undefined) {
      throw new IdempotencyKeyInvalidError(
        `${this.headerName} header`,
        `the field's alias makes its scope too long: ${aliasFault}`,
      );
    }
    const account = await resolveAccount(context, policy, {
      isAnswer: (error) => error instanceof GraphQLError || error instanceof HttpException,
      unresolved: (reason) => {
        this.logger.error(`The accountResolver gave no account for the mutation ${fieldName}: ${reason}.`);
        return new IdempotencyAccountUnresolvedError();
      },
    });
    // The key argument is the key, not what the key is used with.
    const args = Object.fromEntries(Object.entries(field.args).filter(([name]) => name !== this.keyArgument));
    return {
      plan,
      policy,
      scope: { account, endpoint, key },
      endpointLabel: label,
      fingerprint: jsonFingerprint(args),
      terms: {
        key: fromHeader ? `${this.headerName} header` : `${this.keyArgument} argument`,
        usedWith: 'set of arguments',
      },
    };
  }

  replay(_call: GraphqlCall, stored: StoredResponse): Observable<unknown> {
    const outcome = outcomeOf(stored);
    return 'value' in outcome ? of(outcome.value) : throwError(() => outcome.exception);
  }

  async run({ plan }: GraphqlCall, attempt: IdempotencyAttempt, next: CallHandler): Promise<Observable<unknown>> {
    const pipeline = new Observable((subscriber) => attempt.within(() => next.handle().subscribe(subscriber)));
    let response: StoredResponse | undefined;
    let ended: { value: unknown } | { error: unknown };
    try {
      const value = await lastValueFrom(pipeline, { defaultValue: undefined });
      ended = { value };
      response = storedValue(value);
    } catch (error) {
      ended = { error };
      // An answer of the resolver's (a 404, a 422) is its outcome; anything else (a fault) may succeed on a retry.
      if (error instanceof HttpException && plan.isFinalStatus(error.getStatus())) response = storedException(error);
    }
    const refused = await attempt.end({ response, failed: 'error' in ended, final: response !== undefined });
    if (refused) throw refused;
    return 'value' in ended ? of(ended.value) : throwError(() => ended.error);
  }

  refusal(error: IdempotencyError): GraphqlRefusal {
    return new GraphqlRefusal(error);
  }

  /**
   * The field's key: its key argument when it has one, else the request's header, read as an HTTP route reads its
   * own (a bare token or a quoted sf-string); either way 1..255 visible ASCII characters.
   */
  private keyOf({ args, headers }: GraphqlField): { key: string; fromHeader: boolean } | undefined {
    const argument = this.keyArgument === undefined ? undefined : args[this.keyArgument];
    if (argument !== undefined && argument !== null) {
      return { key: this.argumentKey(argument, `${this.keyArgument} argument`), fromHeader: false };
    }
    const key = parseIdempotencyKey(headers?.[this.headerName.toLowerCase()], this.headerName);
    return key === undefined ? undefined : { key, fromHeader: true };
  }

  private argumentKey(key: unknown, keyName: string): string {
    // An `Int` argument, say: the schema, not the client, is at fault, but the field cannot be claimed either way.
    if (typeof key !== 'string') throw new IdempotencyKeyInvalidError(keyName, 'it is not a String (nor an ID)');
    const fault = keyFault(key);
    if (fault !== undefined) throw new IdempotencyKeyInvalidError(keyName, fault);
    return key;
  }

  private keyName(): string {
    const header = `${this.headerName} header`;
    return this.keyArgument === undefined ? header : `${this.keyArgument} argument or an ${header}`;
  }
}
