import { setTimeout as delay } from 'node:timers/promises';
import { Inject, Injectable } from '@nestjs/common';
import { ExternalLedger } from './external-ledger.js';
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

export interface ProviderPayout {
  account: string;
  amount: number;
  currency: string;
  /** The provider pays out once per key, however often it is called with it. */
  idempotencyKey?: string;
}

/** The card network the charges and payouts go through. */
export interface PaymentProvider {
  /** Charges the card; returns the provider's id of the charge. */
  charge(charge: ProviderCharge): Promise<string>;
  /** Pays money out to the account; returns the provider's id of the payout. */
  payout(payout: ProviderPayout): Promise<string>;
}

/**
 * A fake provider with a configurable latency. It keeps its own ledgers (`provider_charges`, `provider_payouts`) in
 * the external ledger, outside the application's transactions, and honours idempotency keys like a real payment API.
 * Test sources: `tok_chargeDeclined` is declined, `tok_providerDown` fails as if unreachable.
 */
@Injectable()
export class FakePaymentProvider implements PaymentProvider {
  constructor(
    @Inject(SAMPLE_CONFIG) private readonly config: SampleConfig,
    private readonly ledger: ExternalLedger,
  ) {}

  async charge({ source, idempotencyKey, ...charge }: ProviderCharge): Promise<string> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    if (source === 'tok_chargeDeclined') throw new CardDeclinedError('Your card was declined.');
    if (source === 'tok_providerDown') throw new ProviderUnavailableError('The payment provider is unavailable.');
    return this.ledger.recordOnce('provider_charges', 'py', idempotencyKey, charge);
  }

  async payout({ idempotencyKey, ...payout }: ProviderPayout): Promise<string> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    return this.ledger.recordOnce('provider_payouts', 'ppo', idempotencyKey, payout);
  }
}
