import { setTimeout as delay } from 'node:timers/promises';
import { Inject, Injectable } from '@nestjs/common';
import { SAMPLE_CONFIG, type SampleConfig } from './sample-config.js';

export const PAYMENT_PROVIDER = Symbol('PAYMENT_PROVIDER');

export interface ProviderCharge {
  account: string;
  amount: number;
  currency: string;
  source: string | null;
}

export class CardDeclinedError extends Error {}
export class ProviderUnavailableError extends Error {}

/** The card network the charges go through. */
export interface PaymentProvider {
  charge(charge: ProviderCharge): Promise<void>;
}

/**
 * A fake provider with a configurable latency. Test sources: `tok_chargeDeclined` is declined,
 * `tok_providerDown` fails as if the provider were unreachable.
 */
@Injectable()
export class FakePaymentProvider implements PaymentProvider {
  constructor(@Inject(SAMPLE_CONFIG) private readonly config: SampleConfig) {}

  async charge({ source }: ProviderCharge): Promise<void> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    if (source === 'tok_chargeDeclined') throw new CardDeclinedError('Your card was declined.');
    if (source === 'tok_providerDown') throw new ProviderUnavailableError('The payment provider is unavailable.');
  }
}
