import { randomUUID } from 'node:crypto';
import { Body, Controller, Get, HttpStatus, Param, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { ApiIdempotent } from '../../src/swagger/index.js';
import { IDEMPOTENCY_DOCS } from '../api-docs.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { ApiError } from '../api-errors.js';
import { Account } from '../auth/account.decorator.js';
import { newId } from '../ids.js';
import { type PayoutInput, PayoutInputPipe } from '../input.pipes.js';
import { PayoutJob, presentPayout } from './payout-job.entity.js';

/** Payouts are queued here and paid by `PayoutWorker`. */
@Controller('v1/payouts')
export class PayoutsController {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {}

  @Post()
  @ApiIdempotent(IDEMPOTENCY_DOCS)
  @Idempotent()
  async create(@Account() account: string, @Body(PayoutInputPipe) input: PayoutInput) {
    const manager = this.idempotency.manager ?? this.dataSource.manager;
    const job = manager.create(PayoutJob, {
      id: newId('po'),
      account,
      status: 'pending',
      idempotencyKey: randomUUID(),
      ...input,
    });
    return presentPayout(await manager.save(job));
  }

  @Get(':id')
  async get(@Account() account: string, @Param('id') id: string) {
    const job = await this.dataSource.manager.findOneBy(PayoutJob, { id, account });
    if (!job)
      throw new ApiError(HttpStatus.NOT_FOUND, 'invalid_request_error', 'resource_missing', `No such payout: ${id}`);
    return presentPayout(job);
  }
}
