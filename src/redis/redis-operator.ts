import type { Cluster, Redis } from 'ioredis';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import {
  type IdempotencyOperations,
  OPERATOR_DEFAULT_LIMIT,
  type OperatorReadOptions,
  type OperatorRecord,
  type OperatorRecordMatch,
  type OperatorRecordState,
  type OperatorReleaseResult,
  type OperatorStateCounts,
  releaseResult,
} from '../store-kit/operator-records.js';
import { DEFAULT_KEY_PREFIX, outcomeChannel, RECORD_SCRIPTS, type RedisClient } from './record-scripts.js';
import { RedisIdempotencyStore, type RedisStoreOptions } from './redis-idempotency.store.js';
import { primariesOf } from './redis-primaries.js';

/**
 * The fields of a record the operator reads (record-scripts.ts), in this order; the body apart, read when asked. The
 * steps (`p`) are read whole, since a hash field is, and only their names kept.
 */
const FIELDS = ['a', 'e', 'k', 's', 't', 'n', 'l', 'x', 'w', 'c', 'u', 'rs', 'p'] as const;

/** Keys a SCAN call is asked for, and so the records one pipeline reads at most. */
const SCAN_COUNT = 500;

/** A record and the key it was read at, to read it again with its body. */
interface FoundRecord {
  key: string;
  record: OperatorRecord;
}

type RecordOrder = (a: FoundRecord, b: FoundRecord) => number;

/**
 * An operator's look at the Redis records, and what an operator may do to them, as `IdempotencyOperator` on
 * PostgreSQL: look up a key, list the keys stuck in progress, release one (fenced on the attempt the operator saw).
 * Reading one scope is one round trip on its key. Listing (`find`, `stuck`, `list`, `countByState`) is a scan of every
 * record under the prefix (SCAN on every primary of a cluster, each page read in one pipeline), O(records) whatever the
 * limit: for an operator, never a request path. States are told on Redis's clock, as the store's scripts tell them.
 * `expired` is never seen (an expired record's key is gone) and `holder-gone` never happens (no attempt holds a
 * transaction on Redis); `purgeExpired()` has nothing to do. A record released with its steps (in progress, its lease
 * ended, for its request to resume) holds the token its release gave it, as on PostgreSQL: `release()` takes it.
 */
export class RedisIdempotencyOperator implements IdempotencyOperations {
  /** A store of its own on the client, for the records' keys. */
  private readonly records: RedisIdempotencyStore;
  private readonly pattern: string;
  /** The store's channel, on which a release wakes the attempts waiting for the record. */
  private readonly channel: string;

  constructor(
    private readonly client: RedisClient,
    /** As the application's store was given it: `keyPrefix` (default `idempotency:`). */
    options: Pick<RedisStoreOptions, 'keyPrefix'> = {},
  ) {
    // Its waits poll, so that it never opens a subscriber connection: the operator waits for nothing.
    this.records = new RedisIdempotencyStore(client, { keyPrefix: options.keyPrefix, outcomeWaits: 'polling' });
    this.pattern = `${escapeGlob(options.keyPrefix ?? DEFAULT_KEY_PREFIX)}{*`;
    this.channel = outcomeChannel(options.keyPrefix ?? DEFAULT_KEY_PREFIX);
  }

  /** The record of one scope, or `undefined`. */
  async inspect(
    scope: IdempotencyScope,
    options: Pick<OperatorReadOptions, 'body'> = {},
  ): Promise<OperatorRecord | undefined> {
    const [found] = await readRecords(this.client, [this.records.keyOf(scope)], options.body === true);
    return found?.record;
  }

  /** The records of a key, across accounts and endpoints unless the match names them, most recent first (a scan). */
  find(match: OperatorRecordMatch, options: OperatorReadOptions = {}): Promise<OperatorRecord[]> {
    const matches = ({ record }: FoundRecord) =>
      record.key === match.key &&
      (match.account === undefined || record.account === match.account) &&
      (match.endpoint === undefined || record.endpoint === match.endpoint);
    return this.select(matches, newestFirst, options);
  }

  /**
   * The records in progress past their lease, oldest first (a scan). A record whose attempt still runs past its lease
   * (a handler slower than its lease, its renewals failing) is listed too: nothing in the record tells it from a dead
   * one.
   */
  stuck(options: Pick<OperatorReadOptions, 'limit'> = {}): Promise<OperatorRecord[]> {
    return this.select(({ record }) => record.state === 'lease-lapsed', oldestFirst, options);
  }

  /** The records of one state, most recent first (a scan); none `expired`, whose keys are gone. */
  async list(
    state: Exclude<OperatorRecordState, 'holder-gone'>,
    options: OperatorReadOptions = {},
  ): Promise<OperatorRecord[]> {
    if (state === 'expired') return [];
    return this.select(({ record }) => record.state === state, newestFirst, options);
  }

  /** How many records stand in each state, in one scan; `expired` is always 0 (their keys are gone). */
  async countByState(): Promise<OperatorStateCounts> {
    const counts: OperatorStateCounts = { running: 0, 'lease-lapsed': 0, completed: 0, expired: 0 };
    await this.eachRecord(({ record }) => {
      counts[record.state as keyof OperatorStateCounts] += 1;
    });
    return counts;
  }

  /**
   * Deletes the in-progress record of `scope` if `attempt` still holds it, lease lapsed or not, steps and all, in one
   * script that wakes the attempts waiting for it on the store's channel, as the store's release does (which, unlike
   * this one, keeps a record with steps for its request to resume); a completed record is never released. A record
   * released with its steps holds the token its release gave it (its `attempt`). When nothing was deleted, the record
   * is read again to say why.
   */
  async release(scope: IdempotencyScope, attempt: string): Promise<OperatorReleaseResult> {
    const key = this.records.keyOf(scope);
    const deleted = await RECORD_SCRIPTS.discard.run(this.client, key, [attempt, this.channel, key]);
    return releaseResult(deleted === 1, () => this.inspect(scope));
  }

  /** Nothing to purge: each record's key expires on its own. */
  purgeExpired(): Promise<number> {
    return Promise.resolve(0);
  }

  /**
   * The first `limit` records that `matches` keeps, in `order`: every record is read without its body, at most twice
   * `limit` of them held at a time; the ones answered are read again with their bodies when asked.
   */
  private async select(
    matches: (found: FoundRecord) => boolean,
    order: RecordOrder,
    options: OperatorReadOptions,
  ): Promise<OperatorRecord[]> {
    const limit = options.limit ?? OPERATOR_DEFAULT_LIMIT;
    let held: FoundRecord[] = [];
    const keepFirst = () => (held = held.sort(order).slice(0, limit));
    await this.eachRecord((found) => {
      if (!matches(found)) return;
      held.push(found);
      if (held.length >= 2 * limit) keepFirst();
    });
    keepFirst();
    if (!options.body) return held.map(({ record }) => record);
    // One record a pipeline: on a cluster, the records of one answer may live on several primaries.
    const reread = await Promise.all(held.map(({ key }) => readRecords(this.client, [key], true)));
    return reread.flatMap((found) => found.map(({ record }) => record));
  }

  /** Every record under the prefix, on every primary: a page of SCAN MATCH at a time, each read in one pipeline. */
  private async eachRecord(visit: (found: FoundRecord) => void): Promise<void> {
    for (const server of await primariesOf(this.client)) {
      let cursor = '0';
      do {
        const [next, keys] = await server.scan(cursor, 'MATCH', this.pattern, 'COUNT', SCAN_COUNT);
        cursor = next;
        if (keys.length > 0) for (const found of await readRecords(server, keys, false)) visit(found);
      } while (cursor !== '0');
    }
  }
}

/**
 * The records at `keys`, in one pipeline led by Redis's clock (`TIME`, as the scripts read it): each one's fields, its
 * body's size, and its body when asked. Keys gone meanwhile (released, expired) and keys that hold no record are left
 * out.
 */
async function readRecords(connection: Redis | Cluster, keys: string[], body: boolean): Promise<FoundRecord[]> {
  const pipeline = connection.pipeline().time();
  for (const key of keys) {
    pipeline.hmget(key, ...FIELDS).hstrlen(key, 'rb');
    if (body) pipeline.hgetBuffer(key, 'rb');
  }
  const [[, clock], ...replies] = (await pipeline.exec()) as Array<[Error | null, unknown]>;
  const [seconds, microseconds] = clock as [string, string];
  const now = Number(seconds) * 1000 + Math.floor(Number(microseconds) / 1000);
  const perKey = body ? 3 : 2;
  const found: FoundRecord[] = [];
  keys.forEach((key, index) => {
    const [[fieldsError, fields], [, bodyBytes], stored] = replies.slice(index * perKey, (index + 1) * perKey);
    const record = fieldsError ? undefined : toRecord(fields as Array<string | null>, bodyBytes as number, now);
    if (record === undefined) return;
    if (stored?.[1]) record.body = stored[1] as Buffer;
    found.push({ key, record });
  });
  return found;
}

/** A record from its fields as `FIELDS` lists them, `now` on Redis's clock; `undefined` for a key with no record. */
function toRecord(fields: Array<string | null>, bodyBytes: number, now: number): OperatorRecord | undefined {
  const [
    account,
    endpoint,
    key,
    status,
    attempt,
    attempts,
    leaseUntil,
    expiresAt,
    awaited,
    created,
    updated,
    response,
    steps,
  ] = fields;
  if (status !== 'in_progress' && status !== 'completed') return undefined;
  const completed = status === 'completed';
  const lease = completed || !leaseUntil ? null : Number(leaseUntil);
  return {
    account: account ?? '',
    endpoint: endpoint ?? '',
    key: key ?? '',
    state: completed ? 'completed' : (lease ?? 0) > now ? 'running' : 'lease-lapsed',
    status,
    // None once released with its steps: no attempt holds it.
    attempt: attempt ?? '',
    attempts: Number(attempts),
    holderTransaction: false,
    awaited: awaited === '1',
    createdAt: new Date(Number(created)),
    leaseUntil: lease === null ? null : new Date(lease),
    // Nothing writes a record once it is completed: its last update is its completion.
    completedAt: completed ? new Date(Number(updated)) : null,
    expiresAt: new Date(Number(expiresAt)),
    responseStatus: completed ? Number(response) : null,
    bodyBytes: completed ? bodyBytes : null,
    steps: steps ? (JSON.parse(steps) as Array<[string, string]>).map(([name]) => name) : [],
  };
}

/** Newest first; records created in the same millisecond by scope, so that an answer is stable. */
const newestFirst: RecordOrder = (a, b) => oldestFirst(b, a);

function oldestFirst(a: FoundRecord, b: FoundRecord): number {
  const scopeOf = ({ record }: FoundRecord) => [record.account, record.endpoint, record.key].join('\u0000');
  return a.record.createdAt.getTime() - b.record.createdAt.getTime() || scopeOf(a).localeCompare(scopeOf(b));
}

/** `text` matched literally by a SCAN pattern: its glob characters escaped. */
function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}
