import type { ClientConfig } from 'pg';
import { describedValue } from '../protocol/described-value.js';
import { boolean, nonEmptyString, oneOf, positiveInteger } from '../protocol/option-checks.js';
import type { BatchLimits } from './record-batches.js';
import type { IdempotencyPostgresOptions } from './idempotency-postgres-options.interface.js';

export const DEFAULT_TABLE_NAME = 'idempotency_records';

/** Up to 64 records a statement, two statements of a kind in flight: see `batching`. */
export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxBatchSize: 64, maxInFlight: 2 };

/** The PostgreSQL room's options, checked at start-up with the wording of every room's. */
export interface PostgresSettings {
  tableName: string;
  /** See `enlistDataSource`. */
  enlist: boolean;
  /** See `onTransactionEscape`. */
  onEscape: 'log' | 'throw' | 'ignore';
  /** See `transactionPooler`. */
  transactionPooler: boolean;
  /** See `listenConnection`; undefined: LISTEN on the data source, or poll behind a transaction pooler. */
  listenConnection?: ClientConfig;
  /** See `batching`; `false`: one statement per request. */
  batching: BatchLimits | false;
}

export function resolvePostgresSettings(options: IdempotencyPostgresOptions): PostgresSettings {
  return {
    tableName: nonEmptyString('tableName', options.tableName ?? DEFAULT_TABLE_NAME),
    enlist: boolean('enlistDataSource', options.enlistDataSource ?? false),
    onEscape: oneOf('onTransactionEscape', options.onTransactionEscape ?? 'log', ['log', 'throw', 'ignore'] as const),
    transactionPooler: boolean('transactionPooler', options.transactionPooler ?? false),
    ...(options.listenConnection === undefined ? {} : { listenConnection: clientConfig(options.listenConnection) }),
    batching: batchLimits(options.batching),
  };
}

function batchLimits(batching: IdempotencyPostgresOptions['batching']): BatchLimits | false {
  if (batching === false) return false;
  if (batching !== undefined && (typeof batching !== 'object' || batching === null)) {
    throw new TypeError(
      `Idempotency option batching must be false or { maxBatchSize, maxInFlight }, got ${describedValue(batching)}`,
    );
  }
  return {
    maxBatchSize: positiveInteger('batching.maxBatchSize', batching?.maxBatchSize ?? DEFAULT_BATCH_LIMITS.maxBatchSize),
    maxInFlight: positiveInteger('batching.maxInFlight', batching?.maxInFlight ?? DEFAULT_BATCH_LIMITS.maxInFlight),
  };
}

/** `listenConnection`: a URL becomes `{ connectionString }`; anything but a URL or a `ClientConfig` is refused. */
export function clientConfig(value: string | ClientConfig): ClientConfig {
  if (typeof value === 'string' && value.length > 0) return { connectionString: value };
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value;
  throw new TypeError(
    `Idempotency option listenConnection must be a postgres:// URL or a node-postgres ClientConfig, got ${describedValue(value)}`,
  );
}
