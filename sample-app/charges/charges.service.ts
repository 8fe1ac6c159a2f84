import { HttpStatus, Inject, Injectable } from '@nestjs/common';
import type { Repository } from 'typeorm';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { ApiError } from '../api-errors.js';
import { newId } from '../ids.js';
import type { ChargeInput } from '../input.pipes.js';
import {
  CardDeclinedError,
  PAYMENT_PROVIDER,
  type PaymentProvider,
  ProviderUnavailableError,
} from '../payment-provider.js';
import { Charge } from './charge.entity.js';

@Injectable()
export class ChargesService {
  constructor(
    @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider,
    private readonly idempotency: PostgresIdempotencyContext,
  ) {}

  /**
   * Charges the card through the provider, then records the charge. The provider gets a key derived from the
   * request's idempotency key, so a retry after a crash is not charged twice. A declined card records nothing.
   */
  async create(account: string, input: ChargeInput): Promise<Charge> {
    let providerChargeId: string;
    try {
      providerChargeId = await this.provider.charge({
        account,
        amount: input.amount,
        currency: input.currency,
        source: input.source,
        idempotencyKey: this.idempotency.run?.deriveKey('provider'),
      });
    } catch (error) {
      if (error instanceof CardDeclinedError) {
        throw new ApiError(HttpStatus.PAYMENT_REQUIRED, 'card_error', 'card_declined', error.message);
      }
      if (error instanceof ProviderUnavailableError) {
        throw new ApiError(HttpStatus.SERVICE_UNAVAILABLE, 'api_error', 'provider_unavailable', error.message);
      }
      throw error;
    }
    const charges = this.charges();
    return charges.save(
      charges.create({ id: newId('ch'), account, status: 'succeeded', amountRefunded: 0, providerChargeId, ...input }),
    );
  }

  list(account: string, limit: number): Promise<Charge[]> {
    return this.charges().find({ where: { account }, order: { created: 'DESC', id: 'DESC' }, take: limit });
  }

  async get(account: string, id: string): Promise<Charge> {
    const charge = await this.charges().findOneBy({ id, account });
    if (!charge)
      throw new ApiError(HttpStatus.NOT_FOUND, 'invalid_request_error', 'resource_missing', `No such charge: ${id}`);
    return charge;
  }

  async updateDescription(account: string, id: string, description: string | null): Promise<Charge> {
    const charge = await this.get(account, id);
    charge.description = description;
    return this.charges().save(charge);
  }

  /** Inside a transactional idempotent request, its transaction's: the charge commits with the stored response. */
  private charges(): Repository<Charge> {
    return this.idempotency.getRepository(Charge);
  }
}
