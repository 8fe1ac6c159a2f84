import { BadRequestException, Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { IdempotencyContext } from 'nest-idempotency';
import { Repository } from 'typeorm';
import { Charge } from './charge.entity.js';
import { PaymentProvider } from './payment-provider.js';

export interface ChargeInput {
  amount: number;
  currency: string;
  description?: string;
  source?: string;
}

@Injectable()
export class ChargesService {
  constructor(
    @InjectRepository(Charge) private readonly charges: Repository<Charge>,
    private readonly provider: PaymentProvider,
    private readonly idempotency: IdempotencyContext,
  ) {}

  /**
   * Records the charge, then has the provider charge it. The repository is the injected one: with
   * `enlistDataSource: true` its writes join the transactional run's transaction, so a provider failure after the
   * insert leaves no row behind.
   */
  async create(account: string, input: unknown): Promise<Charge> {
    const { amount, currency, description, source } = validate(input);
    const charge = await this.charges.save(
      this.charges.create({ account, amount, currency, description: description ?? null, status: 'pending' }),
    );
    charge.providerChargeId = await this.provider.charge({
      amount,
      currency,
      source,
      idempotencyKey: this.idempotency.deriveKey('provider'),
    });
    charge.status = 'succeeded';
    return this.charges.save(charge);
  }
}

function validate(input: unknown): ChargeInput {
  const body = (input ?? {}) as Record<string, unknown>;
  const { amount, currency, description, source } = body;
  if (typeof amount !== 'number' || !Number.isInteger(amount) || amount <= 0) {
    throw new BadRequestException('amount must be a positive integer (in cents)');
  }
  if (typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency)) {
    throw new BadRequestException('currency must be a lower-case ISO 4217 code');
  }
  if (description !== undefined && typeof description !== 'string') {
    throw new BadRequestException('description must be a string');
  }
  if (source !== undefined && typeof source !== 'string') {
    throw new BadRequestException('source must be a string');
  }
  return { amount, currency, description, source };
}
