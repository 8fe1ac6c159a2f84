import { Body, Controller, Get, Param, Patch, Post, Query } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { ApiIdempotent } from '../../src/swagger/index.js';
import { IDEMPOTENCY_DOCS } from '../api-docs.js';
import { Account } from '../auth/account.decorator.js';
import {
  ChargeInputPipe,
  type ChargeInput,
  ChargeUpdatePipe,
  type ChargeUpdate,
  ListLimitPipe,
} from '../input.pipes.js';
import { presentCharge } from './charge.entity.js';
import { ChargesService } from './charges.service.js';

/** Writes need an Idempotency-Key (PATCH: optional); reads pass through. */
@Controller('v1/charges')
@Idempotent()
export class ChargesController {
  constructor(private readonly charges: ChargesService) {}

  @Post()
  @ApiIdempotent(IDEMPOTENCY_DOCS)
  async create(@Account() account: string, @Body(ChargeInputPipe) input: ChargeInput) {
    return presentCharge(await this.charges.create(account, input));
  }

  @Get()
  async list(@Account() account: string, @Query('limit', ListLimitPipe) limit: number) {
    return { object: 'list', data: (await this.charges.list(account, limit)).map(presentCharge) };
  }

  @Get(':id')
  async get(@Account() account: string, @Param('id') id: string) {
    return presentCharge(await this.charges.get(account, id));
  }

  @Patch(':id')
  @ApiIdempotent(IDEMPOTENCY_DOCS)
  @Idempotent({ required: false })
  async update(@Account() account: string, @Param('id') id: string, @Body(ChargeUpdatePipe) update: ChargeUpdate) {
    return presentCharge(await this.charges.updateDescription(account, id, update.description));
  }
}
