import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { invalidRequest } from '../api-errors.js';
import { Charge } from '../charges/charge.entity.js';
import { newId } from '../ids.js';
import type { RefundInput } from '../input.pipes.js';
import { Refund } from './refund.entity.js';

@Injectable()
export class RefundsService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {}

  /**
   * Refunds `amount` (default: what is left) of one of the account's charges; never more than is left.
   * Inside a transactional idempotent request, it runs in that request's transaction.
   */
  create(account: string, input: RefundInput): Promise<Refund> {
    const refund = async (manager: EntityManager) => {
      const charge = await manager.findOne(Charge, {
        where: { id: input.charge, account },
        lock: { mode: 'pessimistic_write' },
      });
      if (!charge) throw invalidRequest(`No such charge: ${input.charge}`, 'charge');
      const left = charge.amount - charge.amountRefunded;
      const amount = input.amount ?? left;
      if (left === 0) throw invalidRequest(`Charge ${charge.id} has already been refunded in full.`, 'charge');
      if (amount > left)
        throw invalidRequest(`amount (${amount}) is more than what is left to refund (${left}).`, 'amount');
      charge.amountRefunded += amount;
      await manager.save(charge);
      return manager.save(manager.create(Refund, { id: newId('re'), account, chargeId: charge.id, amount }));
    };
    const { manager } = this.idempotency;
    return manager ? refund(manager) : this.dataSource.transaction(refund);
  }
}
