import { setTimeout as delay } from 'node:timers/promises';
import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import pg from 'pg';
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
 * A fake provider with a configurable latency. It keeps its own ledgers (`provider_charges`, `provider_payouts`),
 * on connections of its own and outside the application's transactions, as an external service would, and
 * honours idempotency keys like a real payment API. Test sources: `tok_chargeDeclined` is declined,
 * `tok_providerDown` fails as if unreachable.
 */
@Injectable()
export class FakePaymentProvider implements PaymentProvider, OnModuleDestroy {
  private readonly ledger: pg.Pool;
  private readonly logger = new Logger('FakePaymentProvider');

  constructor(@Inject(SAMPLE_CONFIG) private readonly config: SampleConfig) {
    // Straight to PostgreSQL when the app goes through a transaction pooler, as an external service's database is
    // none of the app's pooler's: there, its writes would wait for a server connection held by the very charges'
    // transactions that call it, all of them when the charges outnumber PgBouncer's pool (its query_wait_timeout).
    this.ledger = new pg.Pool({ connectionString: config.databaseDirectUrl ?? config.databaseUrl, max: 4 });
    // An idle connection the database cut is replaced by the pool; its error must not bring the app down.
    this.ledger.on('error', (error) => this.logger.warn(`A provider ledger connection was lost: ${error.message}`));
  }

  /** On `app.close()`, once the idempotency module has let running charges finish (their calls still need the pool). */
  async onModuleDestroy(): Promise<void> {
    await this.ledger.end();
  }

  async charge({ source, ...charge }: ProviderCharge): Promise<string> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    if (source === 'tok_chargeDeclined') throw new CardDeclinedError('Your card was declined.');
    if (source === 'tok_providerDown') throw new ProviderUnavailableError('The payment provider is unavailable.');
    return this.record('provider_charges', 'py', charge);
  }

  async payout(payout: ProviderPayout): Promise<string> {
    if (this.config.providerDelayMs > 0) await delay(this.config.providerDelayMs);
    return this.record('provider_payouts', 'ppo', payout);
  }

  /** Writes to the provider's ledger, once per idempotency key: a repeated call gets the first id back. */
  private async record(
    ledger: 'provider_charges' | 'provider_payouts',
    prefix: string,
    entry: ProviderPayout,
  ): Promise<string> {
    const { rows } = await this.ledger.query<{ id: string }>(
      `WITH recorded AS (
         INSERT INTO ${ledger} (id, idempotency_key, account, amount, currency) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (idempotency_key) DO NOTHING RETURNING id)
       SELECT id FROM recorded UNION ALL SELECT id FROM ${ledger} WHERE idempotency_key = $2`,
      [newId(prefix), entry.idempotencyKey ?? null, entry.account, entry.amount, entry.currency],
    );
    return rows[0].id;
  }
}
