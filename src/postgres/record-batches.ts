import { metrics } from '@opentelemetry/api';
import { IDEMPOTENCY_INSTRUMENTATION_NAME } from '../protocol/idempotency-telemetry.js';
import type {
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  StoredResponse,
} from '../protocol/idempotency-store.interface.js';
import type { ClaimRow, RecordStatements, Statement } from './record-statements.js';
import { HeldRecords, RecordHeldError } from './held-records.js';
import { StatementBatches } from './statement-batches.js';

/** A claim as a batch sends it (an attempt's claim, with or without a holder transaction). */
export interface BatchedClaim {
  scope: IdempotencyScope;
  fingerprint: string;
  attempt: string;
  timing: ClaimTiming;
  /** The scope's advisory lock, which a claim probes to free a record whose holder's transaction has ended. */
  lockKey: string;
  /** Who holds that lock (`LOCKED_BY`) if the claimer's own holder transaction took it; null otherwise. */
  lockedBy: string | null;
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

/**
 * A row of a batch's answer: its item's position (from 1), and for a claim the record's row; for an outcome or a
 * release, whether its record changed after the statement began, for the item to go again alone (`again`).
 */
type BatchRow = { ord: string; again?: boolean } & Partial<ClaimRow>;

/**
 * What a kind of batch sends and answers: the columns of its items after their scopes' (in its statement's order),
 * each item's answer from its row (`none` when the statement answered nothing for it), and an item alone.
 */
interface BatchKind<Item, Answer> {
  operation: 'claim' | 'complete' | 'release';
  scopeOf: (item: Item) => IdempotencyScope;
  columnsOf: (items: Item[]) => unknown[][];
  answerOf: (row: BatchRow) => Answer;
  none: Answer;
  one: (item: Item) => Promise<Answer>;
  /** The answers of items whose records another transaction holds; by default, each alone, one after another. */
  held?: (items: Item[]) => Promise<Answer>[];
}

/** Each operation of a record alone, in a statement of its own: what a batch falls back to. */
export interface SingleRecordStatements {
  claim(claim: BatchedClaim): Promise<ClaimRow | undefined>;
  complete(completion: BatchedCompletion): Promise<boolean>;
  release(claim: IdempotencyClaim): Promise<boolean>;
}

/**
 * The faults of a batch that may be one item's, not the database's: a value the table refuses (class 21, 22, 23: a
 * TTL past the timestamps' range, a character the database's encoding lacks), a row lock waited for past the batch's
 * bound (`isLockWait`), a deadlock (40P01). Its items are then answered each on its own, so that one request's record
 * never fails or holds the requests that shared its statement.
 */
function isItemFault(error: unknown): boolean {
  const code = codeOf(error);
  return typeof code === 'string' && (/^2[123]/.test(code) || isLockWait(code) || code === '40P01');
}

/**
 * Whether a batch may have waited on a held record past its bound: its `lock_timeout` (55P03: a long transaction holds
 * one record), or an application's `statement_timeout` shorter than that, which its connections start with too
 * (57014, as a cancelled statement is).
 */
function isLockWait(code: unknown): boolean {
  return code === '55P03' || code === '57014';
}

function codeOf(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code;
}

/** How a batch is sent, and what is done for its items when it fails by an item's fault. */
interface BatchSending<Item, Answer> {
  /** The items' answers, in their order, from one statement (an item sent again alone answered later). */
  batch: (items: Item[]) => Promise<Array<Answer | Promise<Answer>>>;
  /** One item's answer, from a statement of its own. */
  one: (item: Item) => Promise<Answer>;
  /** The positions (from 0) of the items whose records another transaction holds locked now. */
  lockedOf: (items: Item[]) => Promise<Set<number>>;
  /** The answers of items whose records were found held. */
  held: (items: Item[]) => Promise<Answer>[];
}

/**
 * A batch's answers, or, when it failed by an item's fault, each item's own, answered as soon as it is. Past a row
 * lock's bound, the items whose records are held are answered as their kind says (`held`), and the others go again
 * together at once, so that they never wait behind the held ones; on another item's fault, or when no record is held
 * any more, every item goes one by one.
 */
async function answeredSeparatelyOnItemFault<Item, Answer>(
  items: Item[],
  sending: BatchSending<Item, Answer>,
): Promise<Promise<Answer>[]> {
  try {
    return (await sending.batch(items)).map((answer) => Promise.resolve(answer));
  } catch (error) {
    if (!isItemFault(error)) throw error;
    // Even a batch of one asks: the lock it waited for may be the table's (a migration), not its record's.
    const held = isLockWait(codeOf(error)) ? await heldIn(items, sending) : undefined;
    if (!held?.size) return items.map(sending.one);
    const free = answeredAlongside(
      items.filter((_, index) => !held.has(index)),
      sending,
    );
    const heldOnes = sending.held(items.filter((_, index) => held.has(index)));
    return items.map((_, index) => (held.has(index) ? heldOnes : free).shift() as Promise<Answer>);
  }
}

/**
 * Each item's answer through `one`, one statement at a time: held records, each waiting up to the bound, take one of
 * the batches' connections, never all of them from the batches that come next.
 */
function oneAfterAnother<Item, Answer>(items: Item[], one: (item: Item) => Promise<Answer>): Promise<Answer>[] {
  let previous: Promise<unknown> = Promise.resolve();
  return items.map((item) => {
    const answer = previous.then(() => one(item));
    previous = answer.catch(() => undefined);
    return answer;
  });
}

/** The positions of the items whose records are held, or `undefined` when that cannot be found out. */
function heldIn<Item, Answer>(items: Item[], sending: BatchSending<Item, Answer>): Promise<Set<number> | undefined> {
  return sending.lockedOf(items).catch(() => undefined);
}

/** The answers of items sent again as one statement; one by one if that too fails by an item's fault. */
function answeredAlongside<Item, Answer>(items: Item[], sending: BatchSending<Item, Answer>): Promise<Answer>[] {
  if (items.length === 0) return [];
  const again = sending.batch(items).then(
    (answers) => answers.map((answer) => Promise.resolve(answer)),
    (error: unknown) => {
      if (!isItemFault(error)) throw error;
      return items.map(sending.one);
    },
  );
  return items.map((_, index) => again.then((answers) => answers[index]));
}

/**
 * The claims of every attempt, and the completions and releases of those without a transaction, coalesced: those
 * made while as many of their kind are in flight as `maxInFlight` allows go out together as one statement
 * (`StatementBatches`). Each caller gets its own record's answer; a statement's failure is each of its callers'.
 */
export class RecordBatches {
  private readonly claims: StatementBatches<BatchedClaim, ClaimRow | undefined>;
  private readonly completions: StatementBatches<BatchedCompletion, boolean>;
  private readonly releases: StatementBatches<IdempotencyClaim, boolean>;
  private readonly heldRecords = new HeldRecords();

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
    const batchesOf = <Item, Answer>(kind: BatchKind<Item, Answer>) => {
      const sending: BatchSending<Item, Answer> = {
        batch: async (items) => {
          const values = [...scopeColumns(items.map(kind.scopeOf)), ...kind.columnsOf(items)];
          batchSize.record(items.length, { 'idempotency.store.operation': kind.operation });
          const rows = await run<BatchRow>(statements[`${kind.operation}Batch`], values);
          const answers: Array<Answer | Promise<Answer>> = answersInOrder(items.length, rows, kind.answerOf, kind.none);
          for (const { ord, again } of rows) if (again) answers[Number(ord) - 1] = kind.one(items[Number(ord) - 1]);
          return answers;
        },
        one: kind.one,
        lockedOf: async (items) => {
          const rows = await run<{ ord: string }>(statements.lockedRecords, scopeColumns(items.map(kind.scopeOf)));
          return new Set(rows.map(({ ord }) => Number(ord) - 1));
        },
        held: kind.held ?? ((items) => oneAfterAnother(items, kind.one)),
      };
      return new StatementBatches<Item, Answer>(
        (items) => answeredSeparatelyOnItemFault(items, sending),
        (item) => scopeKey(kind.scopeOf(item)),
        limits,
      );
    };
    this.claims = batchesOf<BatchedClaim, ClaimRow | undefined>({
      operation: 'claim',
      scopeOf: ({ scope }) => scope,
      columnsOf: (items) => [
        items.map(({ fingerprint }) => fingerprint),
        items.map(({ attempt }) => attempt),
        items.map(({ timing }) => timing.leaseSeconds),
        items.map(({ timing }) => timing.ttlSeconds),
        items.map(({ lockKey }) => lockKey),
        items.map(({ lockedBy }) => lockedBy),
      ],
      answerOf: (row) => row as ClaimRow,
      none: undefined,
      one: (item) => single.claim(item),
      // Refused at once (a 503 its client retries), and remembered: each alone would wait its 500 ms to be refused.
      held: (items) => {
        this.heldRecords.remember(items.map(({ scope }) => scopeKey(scope)));
        return items.map(() => refused(new RecordHeldError()));
      },
    });
    this.completions = batchesOf<BatchedCompletion, boolean>({
      operation: 'complete',
      scopeOf: ({ claim }) => claim.scope,
      columnsOf: (items) => [
        items.map(({ claim }) => claim.attempt),
        items.map(({ response }) => response.status),
        items.map(({ response }) => JSON.stringify(response.headers)),
        items.map(({ response }) => response.body),
        items.map(({ ttlSeconds }) => ttlSeconds),
      ],
      answerOf: () => true,
      none: false,
      one: (item) => single.complete(item),
    });
    this.releases = batchesOf<IdempotencyClaim, boolean>({
      operation: 'release',
      scopeOf: ({ scope }) => scope,
      columnsOf: (items) => [items.map(({ attempt }) => attempt)],
      answerOf: () => true,
      none: false,
      one: (item) => single.release(item),
    });
  }

  /**
   * The claim's row, or `undefined` when its record changed under the statement (to be claimed again). A record found
   * held by another transaction moments ago is refused at once (`RecordHeldError`).
   */
  claim(claim: BatchedClaim): Promise<ClaimRow | undefined> {
    if (this.heldRecords.holds(scopeKey(claim.scope))) return refused(new RecordHeldError());
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

/** A rejected answer, handed to its caller a few steps later: never reported as unhandled meanwhile. */
function refused<Answer>(error: Error): Promise<Answer> {
  const answer = Promise.reject(error);
  answer.catch(() => undefined);
  return answer;
}
