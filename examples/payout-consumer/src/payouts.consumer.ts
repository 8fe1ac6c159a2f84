import { Controller } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Idempotent } from 'nest-idempotency';
import { PostgresIdempotencyContext } from 'nest-idempotency/postgres';
import { Payout } from './payout.entity.js';

export interface PayoutRequest {
  account: string;
  amount: number;
}

/**
 * Pays each payout request once per key (the message's AMQP messageId), whatever the broker redelivers: the payout
 * row commits with the idempotency record (transactional mode), then the module acknowledges the message. The
 * handlers never acknowledge messages themselves.
 */
@Controller()
export class PayoutsConsumer {
  constructor(private readonly idempotency: PostgresIdempotencyContext) {}

  @Idempotent()
  @EventPattern('payout.requested')
  async pay(@Payload() request: PayoutRequest): Promise<void> {
    await this.save(request);
  }

  @Idempotent()
  @MessagePattern('payout.create')
  async create(@Payload() request: PayoutRequest): Promise<{ payoutId: string }> {
    return { payoutId: (await this.save(request)).id };
  }

  private save({ account, amount }: PayoutRequest): Promise<Payout> {
    return this.idempotency.getRepository(Payout).save({ account, amount });
  }
}
