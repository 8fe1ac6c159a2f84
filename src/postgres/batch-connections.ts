import type { Pool, PoolClient, PoolConfig } from 'pg';

/** How long a batch waits on a row lock before its items are answered each on its own (`lock_timeout`, in ms). */
export const BATCH_LOCK_TIMEOUT_MS = 500;

/**
 * The settings a batch connection of PostgreSQL's own starts with (its startup `options`: applied before its first
 * statement, and a connection refused rather than opened without them). A row lock is waited for a bounded time:
 * past it, a batch's items are answered each on its own (record-batches.ts), so that one held record never holds
 * every claim of the process. And records are reached by their key only: a named statement's generic plan is made
 * once per connection from the table's statistics of that moment, and one made while the table was empty or small (a
 * new table, one analyzed empty) reads the whole table, then keeps doing so as the table grows, until an ANALYZE
 * replaces it (measured: 26 ms for a claim batch of 32 at 157,000 records, against 1.3 ms; each item looked up alone,
 * as record-statements.ts does, would scan it once per item). Every statement on these connections looks records up
 * by their primary key, so none needs what is turned off here.
 */
export const BATCH_SESSION_OPTIONS = `-c lock_timeout=${BATCH_LOCK_TIMEOUT_MS} -c enable_seqscan=off`;

/**
 * The connections coalesced statements run on: a pool of their own, made at the first batch with the settings and the
 * `connect` listeners of the data source's pool, so that a batch never waits behind the handlers' statements for one
 * of its connections (at full load, the whole batch would wait for the whole queue).
 */
export class BatchConnections {
  private pool?: Pool;
  private ended = false;

  constructor(
    /** The data source's pool, whose settings (and node-postgres) the batches' pool takes. */
    private readonly dataSourcePool: () => Pool,
    /** As many as batches in flight at once. */
    private readonly size: number,
    /**
     * Whether the batches' sessions are PostgreSQL's own (not a transaction pooler's, which would carry a session
     * setting to other clients' transactions): only then do batches wait on a row lock for a bounded time.
     */
    private readonly ownSessions: boolean,
  ) {}

  /** A connection, and its release (given the error that makes the pool discard it). */
  async connect(): Promise<[PoolClient, (discard?: Error) => void]> {
    if (this.ended) throw new Error('The idempotency store is closed');
    const client = await (this.pool ??= this.open()).connect();
    return [client, (discard) => client.release(discard)];
  }

  /** Whether `close()` has ended them: a batch made later is refused (no pool is opened again). */
  get closed(): boolean {
    return this.ended;
  }

  async close(): Promise<void> {
    this.ended = true;
    await this.pool?.end();
  }

  private open(): Pool {
    const master = this.dataSourcePool() as Pool & { options: PoolConfig };
    const PoolClass = master.constructor as new (config: PoolConfig) => Pool;
    // Behind a transaction pooler, session settings would reach other clients' transactions (and PgBouncer refuses
    // startup options); there every statement is unnamed, planned at each execution with the table as it is.
    const config = this.ownSessions ? withStartupOptions(master.options, BATCH_SESSION_OPTIONS) : master.options;
    const pool = new PoolClass({ ...config, min: 0, max: this.size });
    pool.on('error', () => undefined); // an idle connection lost: the next batch opens another
    // The application's set-up of each session (`SET search_path`, `SET ROLE`, in a listener of the data source's pool)
    // is the batches' too: without it, a batch could reach another table than the store's other statements do.
    for (const listener of master.listeners('connect')) pool.on('connect', listener as (client: PoolClient) => void);
    return pool;
  }
}

/**
 * `config` with `added` after the startup options node-postgres would give its connections: a connection string's
 * `options` (taken over the config's), else the config's own, else `PGOPTIONS` (read only when the config has none).
 * A connection string's are extended as written, since node-postgres reads forms that a URL parser refuses (an empty
 * host, with the socket's path in the query).
 */
function withStartupOptions(config: PoolConfig, added: string): PoolConfig {
  const url = config.connectionString;
  if (url && /[?&]options=/.test(url)) {
    const extended = url.replace(
      /([?&]options=)([^&#]*)/,
      (_, name: string, value: string) => `${name}${value}${encodeURIComponent(` ${added}`)}`,
    );
    return { ...config, connectionString: extended };
  }
  return { ...config, options: [config.options || process.env.PGOPTIONS, added].filter(Boolean).join(' ') };
}
