import { metrics } from '@opentelemetry/api';
import { IDEMPOTENCY_INSTRUMENTATION_NAME } from '../protocol/idempotency-telemetry.js';
import type {
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  StoredResponse,
} from '../protocol/idempotency-store.interface.js';
import type { ClaimRow, RecordStatements, Statement } from './record-statements.js';
import { StatementBatches } from './statement-batches.js';

/** A claim of an attempt without a holder transaction, as a batch sends it. */
export interface BatchedClaim {
  scope: IdempotencyScope;
  fingerprint: string;
  attempt: string;
  timing: ClaimTiming;
  /** The scope's advisory lock, which a claim probes to free a record whose holder's transaction has ended. */
  lockKey: string;
}

export interface BatchedCompletion {
  claim: IdempotencyClaim;
  response: StoredResponse;
  ttlSeconds: number;
}

/** How batches are bounded (`IdempotencyPostgresOptions.batching`). */
export interface BatchLimits {
  maxBatchSize: number;
  maxInFlight: number;
}

/** Runs one statement on a pooled connection. */
type StatementRunner = <Row>(statement: Statement, values: unknown[]) => Promise<Row[]>;

/** Each operation of a record alone, in a statement of its own: what a batch falls back to. */
export interface SingleRecordStatements {
  claim(claim: BatchedClaim): Promise<ClaimRow | undefined>;
  complete(completion: BatchedCompletion): Promise<boolean>;
  release(claim: IdempotencyClaim): Promise<boolean>;
}

/**
 * The faults of a batch that may be one item's, not the database's: a value the table refuses (class 21, 22, 23: a
 * TTL past the timestamps' range, a character the database's encoding lacks), a row lock waited for past the batch's
 * `lock_timeout` (55P03: a long transaction holds one record), a deadlock (40P01). Its items then go one by one, each
 * with its own answer, so that one request's record never fails or holds the requests that shared its statement.
 */
function isItemFault(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (/^2[123]/.test(code) || code === '55P03' || code === '40P01');
}

/**
 * A batch's answers, or, when it failed by an item's fault, each item's own through `one`, each answered as soon as
 * it is (an item that waits on a locked record waits alone).
 */
async function answeredSeparatelyOnItemFault<Item, Answer>(
  items: Item[],
  batch: () => Promise<Answer[]>,
  one: (item: Item) => Promise<Answer>,
): Promise<Promise<Answer>[]> {
  try {
    return (await batch()).map((answer) => Promise.resolve(answer));
  } catch (error) {
    if (!isItemFault(error)) throw error;
    return items.map(one);
  }
}

/**
 * The claims, completions and releases of standard attempts (those without a holder transaction), coalesced: those
 * made while as many of their kind are in flight as `maxInFlight` allows go out together as one statement
 * (`StatementBatches`). Each caller gets its own record's answer; a statement's failure is each of its callers'.
 */
export class RecordBatches {
  private readonly claims: StatementBatches<BatchedClaim, ClaimRow | undefined>;
  private readonly completions: StatementBatches<BatchedCompletion, boolean>;
  private readonly releases: StatementBatches<IdempotencyClaim, boolean>;

  constructor(statements: RecordStatements, run: StatementRunner, single: SingleRecordStatements, limits: BatchLimits) {
    // Acquired with the store, as the module's other instruments are (the API proxies no meter registered later).
    const batchSize = metrics
      .getMeter(IDEMPOTENCY_INSTRUMENTATION_NAME)
      .createHistogram('idempotency.store.batch.size', {
        unit: '{record}',
        description:
          'Records per statement of the coalesced claims, outcomes and releases, by idempotency.store.operation.',
        advice: { explicitBucketBoundaries: [1, 2, 4, 8, 16, 32, 64, 128] },
      });
    const answeredBy = async (operation: 'claim' | 'complete' | 'release', values: unknown[][]) => {
      batchSize.record(values[0].length, { 'idempotency.store.operation': operation });
      return run<{ ord: string } & Partial<ClaimRow>>(statements[`${operation}Batch`], values);
    };
    this.claims = new StatementBatches(
      (items) =>
        answeredSeparatelyOnItemFault(
          items,
          async () => {
            const rows = await answeredBy('claim', [
              ...scopeColumns(items.map(({ scope }) => scope)),
              items.map(({ fingerprint }) => fingerprint),
              items.map(({ attempt }) => attempt),
              items.map(({ timing }) => timing.leaseSeconds),
              items.map(({ timing }) => timing.ttlSeconds),
              items.map(({ lockKey }) => lockKey),
            ]);
            return answersInOrder(items.length, rows, (row) => row as ClaimRow, undefined);
          },
          (item) => single.claim(item),
        ),
      ({ scope }) => scopeKey(scope),
      limits,
    );
    this.completions = new StatementBatches(
      (items) =>
        answeredSeparatelyOnItemFault(
          items,
          async () => {
            const rows = await answeredBy('complete', [
              ...scopeColumns(items.map(({ claim }) => claim.scope)),
              items.map(({ claim }) => claim.attempt),
              items.map(({ response }) => response.status),
              items.map(({ response }) => JSON.stringify(response.headers)),
              items.map(({ response }) => response.body),
              items.map(({ ttlSeconds }) => ttlSeconds),
            ]);
            return answersInOrder(items.length, rows, () => true, false);
          },
          (item) => single.complete(item),
        ),
      ({ claim }) => scopeKey(claim.scope),
      limits,
    );
    this.releases = new StatementBatches(
      (items) =>
        answeredSeparatelyOnItemFault(
          items,
          async () => {
            const rows = await answeredBy('release', [
              ...scopeColumns(items.map(({ scope }) => scope)),
              items.map(({ attempt }) => attempt),
            ]);
            return answersInOrder(items.length, rows, () => true, false);
          },
          (item) => single.release(item),
        ),
      ({ scope }) => scopeKey(scope),
      limits,
    );
  }

  /** The claim's row, or `undefined` when its record changed under the statement (to be claimed again). */
  claim(claim: BatchedClaim): Promise<ClaimRow | undefined> {
    return this.claims.submit(claim);
  }

  /** Whether the outcome was stored: false when the attempt no longer holds the record (fenced). */
  complete(completion: BatchedCompletion): Promise<boolean> {
    return this.completions.submit(completion);
  }

  /** Whether the claim was released: false when the attempt no longer holds the record (fenced). */
  release(claim: IdempotencyClaim): Promise<boolean> {
    return this.releases.submit(claim);
  }
}

function scopeColumns(scopes: IdempotencyScope[]): [string[], string[], string[]] {
  return [scopes.map(({ account }) => account), scopes.map(({ endpoint }) => endpoint), scopes.map(({ key }) => key)];
}

/**
 * One record per scope and batch: the same scope twice would be one row changed twice in one statement. Well-formed
 * first, as the database stores text: two spellings it stores alike are one scope.
 */
function scopeKey({ account, endpoint, key }: IdempotencyScope): string {
  return JSON.stringify([account, endpoint, key].map(wellFormed));
}

/** `text` with each lone surrogate as U+FFFD, as PostgreSQL stores it. */
function wellFormed(text: string): string {
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

/** The answer of each item by its position (`ord`, from 1); `none` for an item the statement answered nothing for. */
function answersInOrder<Row extends { ord: string }, Answer>(
  count: number,
  rows: Row[],
  answerOf: (row: Row) => Answer,
  none: Answer,
): Answer[] {
  const answers = new Array<Answer>(count).fill(none);
  for (const row of rows) answers[Number(row.ord) - 1] = answerOf(row);
  return answers;
}
