import type { ExecutionContext } from '@nestjs/common';
import type { Reflector } from '@nestjs/core';
import type { ProtocolIdempotentOptions } from '../protocol/idempotency-options.interface.js';
import { IDEMPOTENT_METADATA } from '../protocol/idempotency.tokens.js';

/**
 * What a transport knows of each handler once: its plan, made from its `@Idempotent()` options (the method's over its
 * class's), or `null` for a handler that is not idempotent. Kept per class, then per handler: an inherited handler is
 * shared by the classes that inherit it, each with its own options.
 */
export class HandlerPlans<Plan, Options extends ProtocolIdempotentOptions = ProtocolIdempotentOptions> {
  private readonly plans = new WeakMap<object, WeakMap<object, Plan | null>>();

  constructor(
    private readonly reflector: Reflector,
    /** The plan of the handler `context` runs, made from its options. */
    private readonly planOf: (options: Options, context: ExecutionContext) => Plan,
  ) {}

  planFor(context: ExecutionContext): Plan | null {
    const [owner, handler] = [context.getClass(), context.getHandler()];
    let plans = this.plans.get(owner);
    if (!plans) this.plans.set(owner, (plans = new WeakMap()));
    let plan = plans.get(handler);
    if (plan === undefined) {
      const [methodOptions, classOptions] = this.reflector.getAll<(Options | undefined)[]>(IDEMPOTENT_METADATA, [
        handler,
        owner,
      ]);
      plan =
        methodOptions || classOptions ? this.planOf({ ...classOptions, ...methodOptions } as Options, context) : null;
      plans.set(handler, plan);
    }
    return plan;
  }
}
