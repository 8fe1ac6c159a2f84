import { HttpStatus, Inject, Injectable } from '@nestjs/common';
import type { Repository } from 'typeorm';
import type { IdempotencyStep, JsonResult, StepOptions } from '../../src/index.js';
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
import { RECEIPT_MAILER, type ReceiptMailer } from '../receipt-mailer.js';
import { type ChargeStep, SAMPLE_CONFIG, type SampleConfig } from '../sample-config.js';
import { pauseIfAt } from '../test-pause.js';
import { Charge } from './charge.entity.js';

/** What the card network answered: the provider's charge, or why the card was declined. */
type CardResult = { providerChargeId: string } | { declined: string };

@Injectable()
export class ChargesService {
  constructor(
    @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider,
    @Inject(RECEIPT_MAILER) private readonly mailer: ReceiptMailer,
    private readonly idempotency: PostgresIdempotencyContext,
    @Inject(SAMPLE_CONFIG) private readonly config: SampleConfig,
  ) {}

  /**
   * A charge in four steps, each a recovery point of the request's idempotency key (docs/steps.md): a retry after a
   * crash, or a failure the client may retry (the provider down), resumes after the last step recorded instead of
   * doing it all again. The charge row, and then its result, commit with their steps; the provider and the mailer
   * get each step's own key, so a step run again after a crash inside it is not charged or sent twice. A declined
   * card is a final answer: the charge is recorded as failed, and the 402 is stored and replayed.
   */
  async create(account: string, input: ChargeInput): Promise<Charge> {
    const chargeId = await this.createCharge(async () => {
      const charges = this.charges();
      const charge = charges.create({ id: newId('ch'), account, status: 'pending', amountRefunded: 0, ...input });
      return (await charges.save(charge)).id;
    });
    return this.settle(account, chargeId, input);
  }

  /**
   * The completer's (`ChargeCompletions`): a charge whose client went away, resumed from the row its first step wrote,
   * which holds its input. One that never got so far has nothing to finish: it fails, its record is released, and the
   * client's retry, if it comes, charges anew.
   */
  async complete(account: string): Promise<Charge> {
    const chargeId = await this.createCharge(async () => {
      throw new Error('the charge row was never written: nothing to complete');
    });
    const { amount, currency, description, source } = await this.get(account, chargeId);
    return this.settle(account, chargeId, { amount, currency, description, source });
  }

  /** The first step: the charge row (its transaction commits with the recovery point). */
  private createCharge(write: () => Promise<string>): Promise<string> {
    return this.step('create-charge', write, { transactional: true });
  }

  /** The steps after the charge row: the card, its result, the receipt. */
  private async settle(account: string, chargeId: string, input: ChargeInput): Promise<Charge> {
    const card = await this.step('charge-card', (step) => this.chargeCard(account, input, step));
    await this.step(
      'record-result',
      async () => {
        const result =
          'declined' in card ? { status: 'failed' } : { status: 'succeeded', providerChargeId: card.providerChargeId };
        await this.charges().update({ id: chargeId, account }, result);
      },
      { transactional: true },
    );
    if ('declined' in card) {
      throw new ApiError(HttpStatus.PAYMENT_REQUIRED, 'card_error', 'card_declined', card.declined);
    }
    await this.step('send-receipt', (step) =>
      this.mailer.send({ account, chargeId, amount: input.amount, currency: input.currency, idempotencyKey: step.key }),
    );
    return this.get(account, chargeId);
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

  /** A declined card is the step's result; a provider that cannot be reached fails the step (the client retries). */
  private async chargeCard(account: string, input: ChargeInput, step: IdempotencyStep): Promise<CardResult> {
    try {
      const { amount, currency, source } = input;
      return {
        providerChargeId: await this.provider.charge({ account, amount, currency, source, idempotencyKey: step.key }),
      };
    } catch (error) {
      if (error instanceof CardDeclinedError) return { declined: error.message };
      if (error instanceof ProviderUnavailableError) {
        throw new ApiError(HttpStatus.SERVICE_UNAVAILABLE, 'api_error', 'provider_unavailable', error.message);
      }
      throw error;
    }
  }

  /** A step of the charge; the crash tests stop the process inside it or after it (`SAMPLE_PAUSE_AT`). */
  private async step<T>(
    name: ChargeStep,
    work: (step: IdempotencyStep) => Promise<T>,
    options?: StepOptions,
  ): Promise<JsonResult<T>> {
    const result = await this.idempotency.step(
      name,
      async (step) => {
        const value = await work(step);
        pauseIfAt(this.config, `in-step:${name}`);
        return value;
      },
      options,
    );
    pauseIfAt(this.config, `after-step:${name}`);
    return result;
  }

  /** Inside a transactional request or step, its transaction's: the rows commit with the recovery point or outcome. */
  private charges(): Repository<Charge> {
    return this.idempotency.getRepository(Charge);
  }
}
