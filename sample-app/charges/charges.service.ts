import { HttpStatus, Inject, Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import type { Repository } from 'typeorm';
import { ApiError } from '../api-errors.js';
import { newId } from '../ids.js';
import type { ChargeInput } from '../input.pipes.js';
import { CardDeclinedError, PAYMENT_PROVIDER, type PaymentProvider, ProviderUnavailableError } from '../payment-provider.js';
import { Charge } from './charge.entity.js';

@Injectable()
export class ChargesService {
  constructor(
    @InjectRepository(Charge) private readonly charges: Repository<Charge>,
    @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider,
  ) {}

  /** Charges the card through the provider, then records the charge. A declined card records nothing. */
  async create(account: string, input: ChargeInput): Promise<Charge> {
    try {
      await this.provider.charge({ account, amount: input.amount, currency: input.currency, source: input.source });
    } catch (error) {
      if (error instanceof CardDeclinedError) {
        throw new ApiError(HttpStatus.PAYMENT_REQUIRED, 'card_error', 'card_declined', error.message);
      }
      if (error instanceof ProviderUnavailableError) {
        throw new ApiError(HttpStatus.SERVICE_UNAVAILABLE, 'api_error', 'provider_unavailable', error.message);
      }
      throw error;
    }
    return this.charges.save(
      this.charges.create({ id: newId('ch'), account, status: 'succeeded', amountRefunded: 0, ...input }),
    );
  }

  list(account: string, limit: number): Promise<Charge[]> {
    return this.charges.find({ where: { account }, order: { created: 'DESC', id: 'DESC' }, take: limit });
  }

  async get(account: string, id: string): Promise<Charge> {
    const charge = await this.charges.findOneBy({ id, account });
    if (!charge) throw new ApiError(HttpStatus.NOT_FOUND, 'invalid_request_error', 'resource_missing', `No such charge: ${id}`);
    return charge;
  }

  async updateDescription(account: string, id: string, description: string | null): Promise<Charge> {
    const charge = await this.get(account, id);
    charge.description = description;
    return this.charges.save(charge);
  }
}
