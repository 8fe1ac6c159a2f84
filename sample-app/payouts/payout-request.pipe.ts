import { HttpException, Injectable, type PipeTransform } from '@nestjs/common';
import { RpcException } from '@nestjs/microservices';
import { API_KEY } from '../auth/api-key.guard.js';
import { type PayoutInput, PayoutInputPipe } from '../input.pipes.js';

/** A payout request as a message carries it: the account it is for (an API key of the sample's) and the payout. */
export interface PayoutRequest extends PayoutInput {
  account: string;
}

/**
 * Validates a payout request message. An invalid one is refused with an `RpcException`, which the module stores as
 * the message's final outcome (acknowledged, and the same error to a request's caller): a redelivery cannot fix it.
 */
@Injectable()
export class PayoutRequestPipe implements PipeTransform<unknown, PayoutRequest> {
  transform(payload: unknown): PayoutRequest {
    const account = (payload as { account?: unknown } | null)?.account;
    if (typeof account !== 'string' || !API_KEY.test(account))
      throw new RpcException({ code: 'invalid_request', message: 'account must be an API key (sk_test_...).' });
    try {
      return { account, ...new PayoutInputPipe().transform(payload) };
    } catch (error) {
      if (!(error instanceof HttpException)) throw error;
      const { message } = (error.getResponse() as { error: { message: string } }).error;
      throw new RpcException({ code: 'invalid_request', message });
    }
  }
}
