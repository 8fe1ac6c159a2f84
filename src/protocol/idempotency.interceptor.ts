import { type CallHandler, type ExecutionContext, Injectable, type NestInterceptor } from '@nestjs/common';
import { isObservable, type Observable } from 'rxjs';
import { IdempotencyError } from './idempotency.errors.js';
import { IdempotencyTransports } from './idempotency-transports.js';
import type { IdempotentCall, IdempotencyTransport } from './idempotency-transport.interface.js';
import type { IdempotencyDecision } from './claim-decision.js';
import { IdempotencyService } from './idempotency.service.js';

/**
 * Registered app-wide: for a call of a transport the module serves, the transport reads it, `IdempotencyService`
 * decides (claim, compare, replay or run), and the transport replays the stored outcome or runs the handler under
 * the claim. Calls of other kinds, and those the transport lets through, pass untouched.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(
    private readonly idempotency: IdempotencyService,
    private readonly transports: IdempotencyTransports,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> | Promise<Observable<unknown>> {
    const transport = this.transports.serving(context);
    return transport ? this.serve(transport, context, next) : next.handle();
  }

  private async serve(
    transport: IdempotencyTransport,
    context: ExecutionContext,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    let call: IdempotentCall | undefined;
    try {
      call = await transport.read(context);
      if (!call) return transport.letThrough ? transport.letThrough(context, next) : next.handle();
      const decision = await this.decided(transport, call);
      return await (decision.action === 'replay'
        ? transport.replay(call, decision.response)
        : transport.run(call, decision.attempt, next));
    } catch (error) {
      if (!(error instanceof IdempotencyError)) {
        if (call) transport.faulted?.(call, error);
        throw error;
      }
      const answer = transport.refusal(error, call, context);
      if (isObservable(answer)) return answer;
      throw answer;
    }
  }

  /** The protocol's decision on `call`, claimed again as long as its transport holds it through refusals. */
  private async decided(transport: IdempotencyTransport, call: IdempotentCall): Promise<IdempotencyDecision> {
    for (;;) {
      try {
        return await this.idempotency.begin(call.scope, call.fingerprint, call.policy, call.terms, {
          transport: transport.name,
          endpointLabel: call.endpointLabel,
          inHand: call.inHand,
        });
      } catch (error) {
        if (!(error instanceof IdempotencyError) || !(await transport.claimAgainAfter?.(error, call))) throw error;
      }
    }
  }
}
