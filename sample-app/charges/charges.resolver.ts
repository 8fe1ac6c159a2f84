import { Args, Context, Field, InputType, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Idempotent } from '../../src/index.js';
import type { AuthenticatedRequest } from '../auth/api-key.guard.js';
import { ChargeInputPipe } from '../input.pipes.js';
import { presentCharge } from './charge.entity.js';
import { ChargesService } from './charges.service.js';

@ObjectType('Charge')
class ChargeObject {
  @Field(() => String) id!: string;
  @Field(() => Int) amount!: number;
  @Field(() => String) currency!: string;
  @Field(() => String) status!: string;
  @Field(() => String, { nullable: true }) description!: string | null;
  /** Seconds since the epoch, as the REST API's `created`. */
  @Field(() => Int) created!: number;
}

@InputType('ChargeInput')
class ChargeInputObject {
  @Field(() => Int) amount!: number;
  @Field(() => String) currency!: string;
  @Field(() => String, { nullable: true }) description?: string | null;
  @Field(() => String, { nullable: true }) source?: string | null;
}

/** The GraphQL context the app's Apollo driver builds: the HTTP request, which `ApiKeyGuard` authenticated. */
interface RequestContext {
  req: AuthenticatedRequest;
}

/**
 * `createCharge` beside `POST /v1/charges`, on the same service: the key is the mutation's `idempotencyKey` argument,
 * or the request's `Idempotency-Key` header, and one of them is required (`IdempotencyGraphQLModule` in app.module.ts).
 */
@Resolver(() => ChargeObject)
export class ChargesResolver {
  private readonly validated = new ChargeInputPipe();

  constructor(private readonly charges: ChargesService) {}

  @Query(() => ChargeObject)
  async charge(@Args('id', { type: () => String }) id: string, @Context() { req }: RequestContext) {
    return presentCharge(await this.charges.get(req.account, id));
  }

  @Idempotent()
  @Mutation(() => ChargeObject)
  async createCharge(
    @Args('input', { type: () => ChargeInputObject }) input: ChargeInputObject,
    @Context() { req }: RequestContext,
    // Read by the module, and shown in the schema.
    @Args('idempotencyKey', { type: () => String, nullable: true }) _idempotencyKey?: string,
  ) {
    return presentCharge(await this.charges.create(req.account, this.validated.transform({ ...input })));
  }
}
