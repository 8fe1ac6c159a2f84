import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';

// What an operator reads of the records and may do to them, whichever store keeps them: each store's operator answers
// in these types, so that the command-line tool and an application's operator routes work on either.

/**
 * Where a record stands, as an operator reads it:
 * - `running`: in progress within its lease (its attempt renews it while it runs);
 * - `lease-lapsed`: in progress past its lease: its attempt crashed, hangs, or finished but gave up finalizing; the
 *   first retry of the same request takes it over;
 * - `holder-gone`: in progress within its lease, but claimed by a transactional attempt whose transaction has ended
 *   (its process died or its connection was cut): the first retry of the same request takes it over already
 *   (PostgreSQL only: no other store holds a transaction for an attempt);
 * - `completed`: its outcome is stored and replayed;
 * - `expired`: past its TTL, free for any request and for the purge (PostgreSQL only: on Redis an expired record's
 *   key is gone).
 */
export type OperatorRecordState = 'running' | 'lease-lapsed' | 'holder-gone' | 'completed' | 'expired';

/** One record, without its stored body unless it was asked for. */
export interface OperatorRecord {
  account: string;
  endpoint: string;
  key: string;
  state: OperatorRecordState;
  /** The stored status: `in_progress` or `completed`. */
  status: 'in_progress' | 'completed';
  /**
   * The token of the attempt that holds (or held) the claim: what `release()` is fenced on. A record released with its
   * steps is held by no attempt: on PostgreSQL its release gave it a token of its own (no attempt's), on Redis it has
   * none and reads as `''`, which `release()` is then given.
   */
  attempt: string;
  /** How many attempts claimed it: more than 1 after takeovers. */
  attempts: number;
  /** Whether its attempt's transaction held the scope's lock (a transactional attempt's holder transaction). */
  holderTransaction: boolean;
  /** Whether an attempt waits for its outcome (and is woken when it is completed or released). */
  awaited: boolean;
  createdAt: Date;
  /** When the lease lapses (or lapsed); `null` once completed. */
  leaseUntil: Date | null;
  completedAt: Date | null;
  expiresAt: Date;
  /** The stored response's status; `null` while in progress. */
  responseStatus: number | null;
  /** The stored body's size in bytes; `null` while in progress. */
  bodyBytes: number | null;
  /**
   * The names of the steps its attempts recorded, in order: in progress, the last one is the operation's recovery point
   * (the next attempt resumes after it); completed, the steps its operation went through. `[]` when none. Their results
   * are never read (they may be sealed, or sensitive).
   */
  steps: string[];
  /** The stored body itself, only when asked for (`{ body: true }`). */
  body?: Buffer;
}

/** What `release()` did: the record deleted, or why not. */
export type OperatorReleaseOutcome = 'released' | 'not-found' | 'completed' | 'other-attempt';

export interface OperatorReleaseResult {
  outcome: OperatorReleaseOutcome;
  /** The record as it stands after the release failed (none once released or not found). */
  record?: OperatorRecord;
}

/** Which records `find()` lists: the key, in any account and endpoint unless they are given. */
export interface OperatorRecordMatch {
  key: string;
  account?: string;
  endpoint?: string;
}

export interface OperatorReadOptions {
  /** Read the stored bodies too. Default false: bodies may hold anything a handler answered. */
  body?: boolean;
  /** At most this many records. Default 100 (`OPERATOR_DEFAULT_LIMIT`). */
  limit?: number;
}

/** `OperatorReadOptions.limit` when none is given. */
export const OPERATOR_DEFAULT_LIMIT = 100;

/** How many records stand in each state (`holder-gone` ones are counted as `running`: see `stuck()`). */
export type OperatorStateCounts = Record<Exclude<OperatorRecordState, 'holder-gone'>, number>;

/** What an operator of any store reads and does: `IdempotencyOperator` (PostgreSQL), `RedisIdempotencyOperator`. */
export interface IdempotencyOperations {
  /** The record of one scope, or `undefined`. */
  inspect(scope: IdempotencyScope, options?: Pick<OperatorReadOptions, 'body'>): Promise<OperatorRecord | undefined>;
  /** The records of a key, across accounts and endpoints unless the match names them, most recent first. */
  find(match: OperatorRecordMatch, options?: OperatorReadOptions): Promise<OperatorRecord[]>;
  /** The records in progress that no live attempt holds (`lease-lapsed`, `holder-gone`), oldest first. */
  stuck(options?: Pick<OperatorReadOptions, 'limit'>): Promise<OperatorRecord[]>;
  /** The records of one state, most recent first. */
  list(state: Exclude<OperatorRecordState, 'holder-gone'>, options?: OperatorReadOptions): Promise<OperatorRecord[]>;
  /** How many records stand in each state. */
  countByState(): Promise<OperatorStateCounts>;
  /**
   * Deletes the in-progress record of `scope`, steps and all, if `attempt` still holds it; says why not otherwise. Unlike
   * the store's own release (which keeps a record with steps for its request to resume), the next request of the key
   * starts the operation anew.
   */
  release(scope: IdempotencyScope, attempt: string): Promise<OperatorReleaseResult>;
  /** Deletes every expired record now; how many it deleted. */
  purgeExpired(batchSize?: number): Promise<number>;
}

/**
 * What a fenced release did, from whether the operator's delete deleted the record and, when it did not, the record
 * read again after it: gone (`not-found`), completed, or held by another attempt than the one the operator saw.
 */
export async function releaseResult(
  released: boolean,
  readAgain: () => Promise<OperatorRecord | undefined>,
): Promise<OperatorReleaseResult> {
  if (released) return { outcome: 'released' };
  const record = await readAgain();
  if (record === undefined) return { outcome: 'not-found' };
  return { outcome: record.status === 'completed' ? 'completed' : 'other-attempt', record };
}
