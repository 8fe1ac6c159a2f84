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

interface BatchedCompletion {
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

/**
 * The claims, completions and releases of standard attempts (those without a holder transaction), coalesced: those
 * made while as many of their kind are in flight as `maxInFlight` allows go out together as one statement
 * (`StatementBatches`). Each caller gets its own record's answer; a statement's failure is each of its callers'.
 */
export class RecordBatches {
  private readonly claims: StatementBatches<BatchedClaim, ClaimRow | undefined>;
  private readonly completions: StatementBatches<BatchedCompletion, boolean>;
  private readonly releases: StatementBatches<IdempotencyClaim, boolean>;

  constructor(
    statements: RecordStatements,
    run: StatementRunner,
    limits: BatchLimits,
    /** Told each batch's size as it goes out. */
    onBatch: (operation: 'claim' | 'complete' | 'release', size: number) => void,
  ) {
    const answeredBy = async (operation: 'claim' | 'complete' | 'release', values: unknown[][]) => {
      onBatch(operation, values[0].length);
      return run<{ ord: string } & Partial<ClaimRow>>(statements[`${operation}Batch`], values);
    };
    this.claims = new StatementBatches(
      async (items) => {
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
      ({ scope }) => scopeKey(scope),
      limits,
    );
    this.completions = new StatementBatches(
      async (items) => {
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
      ({ claim }) => scopeKey(claim.scope),
      limits,
    );
    this.releases = new StatementBatches(
      async (items) => {
        const rows = await answeredBy('release', [
          ...scopeColumns(items.map(({ scope }) => scope)),
          items.map(({ attempt }) => attempt),
        ]);
        return answersInOrder(items.length, rows, () => true, false);
      },
      ({ scope }) => scopeKey(scope),
      limits,
    );
  }

  /** The claim's row, or `undefined` when its record changed under the statement (to be claimed again). */
  claim(claim: BatchedClaim): Promise<ClaimRow | undefined> {
    return this.claims.submit(claim);
  }

  /** Whether the outcome was stored: false when the attempt no longer holds the record (fenced). */
  complete(claim: IdempotencyClaim, response: StoredResponse, ttlSeconds: number): Promise<boolean> {
    return this.completions.submit({ claim, response, ttlSeconds });
  }

  /** Whether the claim was released: false when the attempt no longer holds the record (fenced). */
  release(claim: IdempotencyClaim): Promise<boolean> {
    return this.releases.submit(claim);
  }
}

function scopeColumns(scopes: IdempotencyScope[]): [string[], string[], string[]] {
  return [scopes.map(({ account }) => account), scopes.map(({ endpoint }) => endpoint), scopes.map(({ key }) => key)];
}

/** One record per scope and batch: the same scope twice would be one row changed twice in one statement. */
function scopeKey({ account, endpoint, key }: IdempotencyScope): string {
  return JSON.stringify([account, endpoint, key]);
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
