import { Body, Controller, Post, Req, UseGuards } from '@nestjs/common';
import { Idempotent } from 'nest-idempotency';
import { AccountGuard, type AccountRequest } from './account.guard.js';
import { ChargesService } from './charges.service.js';

@Controller('charges')
@UseGuards(AccountGuard)
export class ChargesController {
  constructor(private readonly charges: ChargesService) {}

  @Post()
  @Idempotent()
  create(@Req() request: AccountRequest, @Body() input: unknown) {
    return this.charges.create(request.account, input);
  }
}
