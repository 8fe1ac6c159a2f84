import { boolean, nonEmptyString, oneOf } from '../protocol/option-checks.js';
import type { IdempotencyPostgresOptions } from './idempotency-postgres-options.interface.js';

export const DEFAULT_TABLE_NAME = 'idempotency_records';

/** The PostgreSQL room's options, checked at start-up with the wording of every room's. */
export interface PostgresSettings {
  tableName: string;
  /** See `enlistDataSource`. */
  enlist: boolean;
  /** See `onTransactionEscape`. */
  onEscape: 'log' | 'throw' | 'ignore';
}

export function resolvePostgresSettings(options: IdempotencyPostgresOptions): PostgresSettings {
  return {
    tableName: nonEmptyString('tableName', options.tableName ?? DEFAULT_TABLE_NAME),
    enlist: boolean('enlistDataSource', options.enlistDataSource ?? false),
    onEscape: oneOf('onTransactionEscape', options.onTransactionEscape ?? 'log', ['log', 'throw', 'ignore'] as const),
  };
}
