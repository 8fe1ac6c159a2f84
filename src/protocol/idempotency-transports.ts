import { type ExecutionContext, Injectable } from '@nestjs/common';
import type { IdempotencyTransport } from './idempotency-transport.interface.js';

/**
 * The transports the module serves, one per kind of call. Each registers itself as Nest creates it, with its room's
 * module (the root module's own transport with it, the others with the module an application imports beside it); the module is global, so they find this without importing it.
 */
@Injectable()
export class IdempotencyTransports {
  private readonly transports: IdempotencyTransport[] = [];

  register(transport: IdempotencyTransport): void {
    this.transports.push(transport);
  }

  /** The transport of `context`'s call, or `undefined` for a kind of call none serves. */
  serving(context: ExecutionContext): IdempotencyTransport | undefined {
    const type = context.getType<string>();
    return this.transports.find(({ serves: { type: served, rpcContext } }) => {
      if (served !== type) return false;
      return !rpcContext || context.switchToRpc().getContext() instanceof rpcContext;
    });
  }
}
