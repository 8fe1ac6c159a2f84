import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { ApiIdempotent } from '../../src/swagger/index.js';
import { IDEMPOTENCY_DOCS } from '../api-docs.js';
import { Account } from '../auth/account.decorator.js';
import { type RefundInput, RefundInputPipe } from '../input.pipes.js';
import { presentRefund } from './refund.entity.js';
import { RefundsService } from './refunds.service.js';

@Controller('v1/refunds')
export class RefundsController {
  constructor(private readonly refunds: RefundsService) {}

  @Post()
  @ApiIdempotent(IDEMPOTENCY_DOCS)
  @Idempotent()
  async create(@Account() account: string, @Body(RefundInputPipe) input: RefundInput) {
    return presentRefund(await this.refunds.create(account, input));
  }
}
