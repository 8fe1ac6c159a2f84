import { setTimeout as delay } from 'node:timers/promises';
import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { newId } from './ids.js';
import { SAMPLE_CONFIG, type SampleConfig } from './sample-config.js';

export const PAYMENT_PROVIDER = Symbol('PAYMENT_PROVIDER');

export interface ProviderCharge {
  account: string;
  amount: number;
  currency: string;
  source: string | null;
  /** The provider charges once per key, however often it is called with it. */
  idempotencyKey?: string;
}

export class CardDeclinedError extends Error {}
export class ProviderUnavailableError extends Error {}

/** The card network the charges go through. */
export interface PaymentProvider {
  /** Charges the card; returns the provider's id of the charge. */
  charge(charge: ProviderCharge): Promise<string>;
}

/**
 * A fake provider with a configurable latency. It keeps its own ledger (`provider_charges`), written outside
 * the application's transactions as an external service's would be, and honours idempotency keys like a real
 * payment API. Test sources: `tok_chargeDeclined` is declined, `tok_providerDown` fails as if unreachable.
 */
@Injectable()
export class FakePaymentProvider implements PaymentProvider {
  constructor(
    @Inject(SAMPLE_CONFIG) private readonly config: SampleConfig,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  async charge({ account, amount, currency, source, idempotencyKey }: ProviderCharge): Promise<string> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    if (source === 'tok_chargeDeclined') throw new CardDeclinedError('Your card was declined.');
    if (source === 'tok_providerDown') throw new ProviderUnavailableError('The payment provider is unavailable.');
    const [row]: Array<{ id: string }> = await this.dataSource.query(
      `WITH charged AS (
         INSERT INTO provider_charges (id, idempotency_key, account, amount, currency) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (idempotency_key) DO NOTHING RETURNING id)
       SELECT id FROM charged UNION ALL SELECT id FROM provider_charges WHERE idempotency_key = $2`,
      [newId('py'), idempotencyKey ?? null, account, amount, currency],
    );
    return row.id;
  }
}
