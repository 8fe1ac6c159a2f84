import { Inject, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import pg from 'pg';
import { newId } from './ids.js';
import { SAMPLE_CONFIG, type SampleConfig } from './sample-config.js';

/** The ledgers of the fake external services (`provider_charges`, `provider_payouts`, `mailer_receipts`). */
export type ExternalLedgerTable = 'provider_charges' | 'provider_payouts' | 'mailer_receipts';

/**
 * Where the fake external services (the payment provider, the receipt mailer) keep their state: tables of their own,
 * on connections of their own and outside the application's transactions, as an external service's would be. Each
 * honours idempotency keys like a real API: an entry is written once per key.
 */
@Injectable()
export class ExternalLedger implements OnModuleDestroy {
  private readonly pool: pg.Pool;
  private readonly logger = new Logger('ExternalLedger');

  constructor(@Inject(SAMPLE_CONFIG) config: SampleConfig) {
    // Straight to PostgreSQL when the app goes through a transaction pooler, as an external service's database is
    // none of the app's pooler's: there, its writes would wait for a server connection held by the very charges'
    // transactions that call it, all of them when the charges outnumber PgBouncer's pool (its query_wait_timeout).
    this.pool = new pg.Pool({ connectionString: config.databaseDirectUrl ?? config.databaseUrl, max: 4 });
    // An idle connection the database cut is replaced by the pool; its error must not bring the app down.
    this.pool.on('error', (error) => this.logger.warn(`An external ledger connection was lost: ${error.message}`));
  }

  /** On `app.close()`, once the idempotency module has let running work finish (its calls still need the pool). */
  async onModuleDestroy(): Promise<void> {
    await this.pool.end();
  }

  /**
   * Writes `entry` (column → value) to `ledger` under a new id of `prefix`, once per idempotency key: a repeated
   * write gets the first entry's id back. Without a key, every write is a new entry.
   */
  async recordOnce(
    ledger: ExternalLedgerTable,
    prefix: string,
    idempotencyKey: string | undefined,
    entry: Record<string, string | number>,
  ): Promise<string> {
    const columns = Object.keys(entry);
    const values = columns.map((_, index) => `$${index + 3}`);
    const { rows } = await this.pool.query<{ id: string }>(
      `WITH recorded AS (
         INSERT INTO ${ledger} (id, idempotency_key, ${columns.join(', ')}) VALUES ($1, $2, ${values.join(', ')})
         ON CONFLICT (idempotency_key) DO NOTHING RETURNING id)
       SELECT id FROM recorded UNION ALL SELECT id FROM ${ledger} WHERE idempotency_key = $2`,
      [newId(prefix), idempotencyKey ?? null, ...Object.values(entry)],
    );
    return rows[0].id;
  }
}
