import { createHash, randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import type {
  ClaimResult,
  ClaimTiming,
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
  StoredStep,
  StoreHealth,
  StoreHealthCheck,
  StoreTransaction,
} from '../protocol/idempotency-store.interface.js';
import { within } from '../protocol/store-bounds.js';
import { RecordPolling } from '../store-kit/record-polling.js';
import { OutcomeSubscription } from './outcome-subscription.js';
import { DEFAULT_KEY_PREFIX, outcomeChannel, RECORD_SCRIPTS, type RedisClient } from './record-scripts.js';
import { checkRedisServers } from './redis-server-check.js';

export interface RedisStoreOptions {
  /** What the records' keys and the store's pub/sub channel start with. Default: `idempotency:`. */
  keyPrefix?: string;
  /**
   * How an attempt waiting for another's outcome (`inFlight: 'wait'`) learns of it: `'pubsub'`, told on the store's
   * channel by a subscriber connection of its own (polling while that is down), or `'polling'`, reading the record
   * (for a server that refuses pub/sub). Default: `'pubsub'`.
   */
  outcomeWaits?: 'pubsub' | 'polling';
}

/** Why a Redis store runs no transactional route, and what to use instead: the module's start-up refusal says it. */
const NO_TRANSACTIONS =
  "Redis shares no transaction with the application's database, so a handler's writes and its outcome cannot commit " +
  'together: make those handlers standard (drop `transactional: true`), or keep their records on PostgreSQL ' +
  '(`nest-idempotency/postgres`)';

/**
 * The records on Redis, on the application's own ioredis client (a `Redis` or a `Cluster`): each record one hash,
 * each operation one Lua script, one round trip, atomic on Redis's clock; expiry by the keys' own TTLs, so that the
 * purge has nothing to do. Standard mode only: its transactions are refused (see `transactionsRefused`).
 */
export class RedisIdempotencyStore implements IdempotencyStore {
  readonly transactionsRefused = NO_TRANSACTIONS;
  private readonly prefix: string;
  private readonly channel: string;
  private readonly outcomeWaits: OutcomeSubscription | RecordPolling;

  constructor(
    /** The application's client the records live on (the module's `RedisIdempotencyOperator` reads them on it too). */
    readonly client: RedisClient,
    options: RedisStoreOptions = {},
  ) {
    this.prefix = options.keyPrefix ?? DEFAULT_KEY_PREFIX;
    refuseKeyPrefixes(client, this.prefix);
    this.channel = outcomeChannel(this.prefix);
    const isHeld = async (scope: IdempotencyScope) =>
      (await RECORD_SCRIPTS.isHeld.run(this.client, this.keyOf(scope), [])) === 1;
    this.outcomeWaits =
      options.outcomeWaits === 'polling'
        ? new RecordPolling(isHeld)
        : new OutcomeSubscription(client, this.channel, isHeld);
  }

  async claim(
    scope: IdempotencyScope,
    fingerprint: string,
    attempt: string,
    timing: ClaimTiming,
  ): Promise<ClaimResult> {
    const reply = (await RECORD_SCRIPTS.claim.run(this.client, this.keyOf(scope), [
      fingerprint,
      attempt,
      milliseconds(timing.leaseSeconds),
      milliseconds(timing.ttlSeconds),
      scope.account,
      scope.endpoint,
      scope.key,
    ])) as Buffer[];
    const [answer, storedFingerprint, status, headers, body, leftMs] = reply;
    switch (answer.toString()) {
      case 'claimed':
      case 'takeover': {
        const claimed = { claimed: true, takeover: answer.toString() === 'takeover' } as const;
        const steps = reply[1] ? stepsOf(reply[1]) : [];
        return steps.length > 0 ? { ...claimed, steps } : claimed;
      }
      case 'in_progress':
        return { claimed: false, existing: { status: 'in_progress', fingerprint: storedFingerprint.toString() } };
      default:
        return {
          claimed: false,
          existing: {
            status: 'completed',
            fingerprint: storedFingerprint.toString(),
            response: {
              status: Number(status.toString()),
              headers: JSON.parse(headers.toString()) as StoredResponse['headers'],
              body,
            },
            expiresInSeconds: (leftMs as unknown as number) / 1000,
          },
        };
    }
  }

  async renew({ scope, attempt }: IdempotencyClaim, timing: ClaimTiming): Promise<boolean> {
    const renewed = await RECORD_SCRIPTS.renew.run(this.client, this.keyOf(scope), [
      attempt,
      milliseconds(timing.leaseSeconds),
      milliseconds(timing.ttlSeconds),
    ]);
    return renewed === 1;
  }

  async complete(
    { scope, attempt }: IdempotencyClaim,
    response: StoredResponse,
    ttlSeconds: number,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    if (transaction !== undefined) throw this.noTransactions();
    const key = this.keyOf(scope);
    const completed = await RECORD_SCRIPTS.complete.run(this.client, key, [
      attempt,
      milliseconds(ttlSeconds),
      response.status,
      JSON.stringify(response.headers),
      response.body,
      this.channel,
      key,
    ]);
    return completed === 1;
  }

  async release({ scope, attempt }: IdempotencyClaim): Promise<boolean> {
    const key = this.keyOf(scope);
    const released = await RECORD_SCRIPTS.release.run(this.client, key, [attempt, this.channel, key, randomUUID()]);
    return released === 1;
  }

  async recordStep(
    { scope, attempt }: IdempotencyClaim,
    step: StoredStep,
    transaction?: StoreTransaction,
  ): Promise<boolean> {
    if (transaction !== undefined) throw this.noTransactions();
    const recorded = await RECORD_SCRIPTS.recordStep.run(this.client, this.keyOf(scope), [
      attempt,
      JSON.stringify([step.name, step.result]),
    ]);
    return recorded === 1;
  }

  async markAwaited(scope: IdempotencyScope): Promise<boolean> {
    if (this.outcomeWaits instanceof RecordPolling) return this.outcomeWaits.markAwaited(scope);
    const key = this.keyOf(scope);
    const marked = (await RECORD_SCRIPTS.markAwaited.run(this.client, key, [])) === 1;
    if (marked) this.outcomeWaits.awaited(key);
    return marked;
  }

  waitForChange(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    if (this.outcomeWaits instanceof RecordPolling) return this.outcomeWaits.wait(scope, timeoutMs);
    return this.outcomeWaits.wait(scope, this.keyOf(scope), timeoutMs);
  }

  /** Refused: the module refuses transactional handlers on this store at start-up, so only a misuse gets here. */
  beginTransaction(): Promise<StoreTransaction> {
    return Promise.reject(this.noTransactions());
  }

  /** None: a claim falls back to its lease. */
  beginHoldingTransaction(): Promise<undefined> {
    return Promise.resolve(undefined);
  }

  /** Refuses a server that could lose records (one that may evict them) or cannot run the scripts. */
  checkSchema(): Promise<void> {
    return checkRedisServers(this.client);
  }

  async checkHealth(timeoutMs: number, check: StoreHealthCheck = {}): Promise<StoreHealth> {
    await within(this.client.ping(), timeoutMs, () => new Error(`Redis did not answer within ${timeoutMs} ms`));
    if (this.outcomeWaits instanceof RecordPolling) return {};
    const listening = await this.outcomeWaits.isListening(timeoutMs, check.listen ?? false);
    return listening === undefined ? {} : { listening };
  }

  /** Nothing to purge: each record's key expires on its own, at its expiry. */
  purgeExpired(): Promise<number> {
    return Promise.resolve(0);
  }

  /** Closes the store's subscriber connection; the application's client stays the application's to close. */
  close(): Promise<void> {
    return this.outcomeWaits.close();
  }

  /** The record's key: its scope's digest is its hash tag, so that all a record's keys share one cluster slot. */
  keyOf(scope: IdempotencyScope): string {
    const digest = createHash('sha256').update(JSON.stringify([scope.account, scope.endpoint, scope.key]));
    return `${this.prefix}{${digest.digest('hex')}}`;
  }

  private noTransactions(): IdempotencySetupError {
    return new IdempotencySetupError(`The Redis idempotency store runs no transactional handler: ${NO_TRANSACTIONS}.`);
  }
}

/** A record's steps, as its `p` field holds them (record-scripts.ts). */
function stepsOf(stored: Buffer): StoredStep[] {
  return (JSON.parse(stored.toString()) as Array<[string, string]>).map(([name, result]) => ({ name, result }));
}

/**
 * The longest lease or TTL Redis is given: past about 1e17 ms, a script writes an expiry in exponent form, which
 * `PEXPIREAT` refuses after the record was written, leaving it without one.
 */
const MAX_SECONDS = 1e12;

/** Redis takes whole milliseconds; a lease of a fraction of one is rounded up, never to none. */
function milliseconds(seconds: number): number {
  if (!(seconds <= MAX_SECONDS)) {
    throw new RangeError(`The Redis store keeps a record at most ${MAX_SECONDS} s (a lease or TTL), not ${seconds} s`);
  }
  return Math.max(1, Math.ceil(seconds * 1000));
}

/**
 * Refuses the prefixes that would break the records' keys: the client's own (`keyPrefix` of ioredis), which ioredis
 * adds to keys but not to the patterns and channels the store and its operator use, and braces in the store's, which
 * would make the prefix, not each record's digest, the hash tag: every record in one slot of a Cluster.
 */
function refuseKeyPrefixes(client: RedisClient, keyPrefix: string): void {
  const options = client instanceof Cluster ? [client.options, client.options.redisOptions] : [client.options];
  const clientPrefix = options.find((option) => option?.keyPrefix)?.keyPrefix;
  if (clientPrefix) {
    throw new IdempotencySetupError(
      `The Redis store's client has ioredis's own \`keyPrefix\` (${JSON.stringify(clientPrefix)}), which it would not ` +
        'apply to the channels and key patterns the store reads: give the store a client without one, and its prefix ' +
        `as the store's \`keyPrefix\` (IdempotencyRedisModule.forRoot({ client, keyPrefix: ${JSON.stringify(clientPrefix)} })).`,
    );
  }
  if (/[{}]/.test(keyPrefix)) {
    throw new IdempotencySetupError(
      `The Redis store's keyPrefix ${JSON.stringify(keyPrefix)} has a brace, which would make it the hash tag of every ` +
        "record's key (one slot of a Redis Cluster for them all): choose one without `{` or `}`.",
    );
  }
}
