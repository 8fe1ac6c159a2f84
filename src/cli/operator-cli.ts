import { parseArgs } from 'node:util';
import { IdempotencyOperator, type OperatorQuery } from '../postgres/idempotency-operator.js';
import { DEFAULT_TABLE_NAME } from '../postgres/postgres-options.js';
import { DEFAULT_KEY_PREFIX } from '../redis/record-scripts.js';
import type { IdempotencyOperations, OperatorRecord } from '../store-kit/operator-records.js';
import { describeRecord, describeRelease, recordJson } from './operator-output.js';

/** The command's exit codes, for scripts. */
export const EXIT = {
  /** Done: a record shown, a list shown (even empty), a key released, a purge run. */
  done: 0,
  /** Nothing matched (`inspect`), or the key was not released (`release`). */
  notDone: 1,
  /** The command line was wrong: an unknown command or option, a missing one, `release` without `--attempt`. */
  usage: 2,
  /** The store (the database, or Redis) could not be reached, or refused a command (a table that does not exist). */
  database: 3,
} as const;

export const USAGE = `Usage: nest-idempotency <command> [options]

Commands:
  inspect --key K [--account A] [--endpoint E] [--body]
                  The records of key K (in every account and endpoint unless given): state, attempt, steps recorded,
                  lease, expiry, the stored status and body size. The stored body only with --body.
  stuck           The records in progress that no live attempt holds (past their lease, or whose holder
                  transaction has ended, on PostgreSQL), oldest first.
  release --account A --endpoint E --key K --attempt T
                  Deletes the in-progress record of that scope, its steps too, if attempt T (as inspect shows it;
                  for a record released with its steps, the token of that release) still holds it. A retry then
                  runs the handler again from its first step, even if the attempt T still runs.
  purge [--batch-size N]
                  Deletes every expired record now, N at a time (default 1000). On Redis there is none to delete:
                  an expired record's key is gone.

The records' store: PostgreSQL, or Redis (one store; a flag of either overrides the environment):
  --database-url URL   The database (default: the DATABASE_URL environment variable)
  --table NAME         The records table, optionally schema-qualified (default ${DEFAULT_TABLE_NAME})
  --redis-url URL      The Redis (default: the REDIS_URL environment variable)
  --redis-cluster-nodes HOST:PORT,...
                       Some nodes of a Redis Cluster (default: the REDIS_CLUSTER_NODES environment variable)
  --key-prefix PREFIX  What the records' keys start with on Redis, the store's keyPrefix (default ${DEFAULT_KEY_PREFIX})
  Listing on Redis (inspect, stuck) scans every record under the prefix.

Options:
  --limit N            At most N records (inspect, stuck; default 100)
  --json               JSON on stdout, for scripts
  --help               This help

Exit codes: 0 done; 1 nothing matched or not released; 2 usage error; 3 store unreachable or failing.`;

const OPTIONS = {
  'database-url': { type: 'string' },
  table: { type: 'string' },
  'redis-url': { type: 'string' },
  'redis-cluster-nodes': { type: 'string' },
  'key-prefix': { type: 'string' },
  key: { type: 'string' },
  account: { type: 'string' },
  endpoint: { type: 'string' },
  attempt: { type: 'string' },
  body: { type: 'boolean' },
  limit: { type: 'string' },
  'batch-size': { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

/** Where the command writes, and what it reads of its environment. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
}

class UsageError extends Error {}

/** The records' store, as the command line or the environment gives it. */
type RecordsStore =
  | { kind: 'postgres'; url: string }
  | { kind: 'redis'; at: { url: string } | { clusterNodes: Array<{ host: string; port: number }> } };

/** Where each store is named: a flag, or else an environment variable. */
const STORE_SOURCES = [
  { flag: 'database-url', variable: 'DATABASE_URL', store: (url: string) => ({ kind: 'postgres', url }) },
  { flag: 'redis-url', variable: 'REDIS_URL', store: (url: string) => ({ kind: 'redis', at: { url } }) },
  {
    flag: 'redis-cluster-nodes',
    variable: 'REDIS_CLUSTER_NODES',
    store: (nodes: string) => ({ kind: 'redis', at: { clusterNodes: clusterNodeAddresses(nodes) } }),
  },
] as const satisfies ReadonlyArray<{ flag: keyof Values; variable: string; store: (value: string) => RecordsStore }>;
const FLAGS = STORE_SOURCES.map(({ flag }) => flag);

/** An operator on the records' store, and the closing of its one connection (a cluster's, one a node). */
interface OperatorSession {
  operator: IdempotencyOperations;
  close(): Promise<void>;
}

/** How the command's messages name each store. */
const STORE_NAMES: Record<RecordsStore['kind'], string> = { postgres: 'the database', redis: 'Redis' };

/** Runs one command line (without `node` and the script); answers the exit code. */
export async function runOperatorCli(argv: string[], io: CliIo): Promise<number> {
  let command: string | undefined;
  let values: Values;
  try {
    const parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
    values = parsed.values;
    if (values.help) {
      io.out(USAGE);
      return EXIT.done;
    }
    if (parsed.positionals.length !== 1) throw new UsageError('give one command: inspect, stuck, release or purge');
    command = parsed.positionals[0];
    checkCommand(command, values);
  } catch (error) {
    io.err(`nest-idempotency: ${(error as Error).message}\n\n${USAGE}`);
    return EXIT.usage;
  }
  let store: RecordsStore;
  try {
    store = recordsStore(values, io.env);
  } catch (error) {
    io.err(`nest-idempotency: ${(error as Error).message}`);
    return EXIT.usage;
  }
  let session: OperatorSession;
  try {
    session =
      store.kind === 'postgres' ? await openPostgres(store.url, values.table) : await openRedis(store.at, values);
  } catch (error) {
    io.err(`nest-idempotency: ${STORE_NAMES[store.kind]} could not be reached: ${(error as Error).message}`);
    return EXIT.database;
  }
  try {
    return await runCommand(command, values, session.operator, io);
  } catch (error) {
    io.err(`nest-idempotency: ${STORE_NAMES[store.kind]} refused ${command}: ${(error as Error).message}`);
    return EXIT.database;
  } finally {
    await session.close().catch(() => undefined);
  }
}

/**
 * The one store the command reads: from its flags if any names one, else from the environment. More than one is
 * refused rather than chosen among: an application on Redis often has a DATABASE_URL too, for its own data.
 */
function recordsStore(values: Values, env: CliIo['env']): RecordsStore {
  const flagged = FLAGS.some((flag) => values[flag] !== undefined);
  const given = STORE_SOURCES.map(({ flag, variable, store }) => ({
    name: flagged ? `--${flag}` : variable,
    value: flagged ? values[flag] : env[variable],
    store,
  })).filter(({ value }) => value);
  if (given.length === 0) {
    throw new UsageError(
      'no store: set DATABASE_URL or give --database-url (PostgreSQL), or set REDIS_URL or give --redis-url ' +
        '(Redis; REDIS_CLUSTER_NODES or --redis-cluster-nodes for a Redis Cluster)',
    );
  }
  if (given.length > 1) {
    throw new UsageError(
      `${given.map(({ name }) => name).join(' and ')} are ${flagged ? 'given' : 'set'}, each naming a store: name ` +
        'the one that holds the records (--database-url, --redis-url or --redis-cluster-nodes)',
    );
  }
  const [{ value, store }] = given as Array<{ value: string; store: (value: string) => RecordsStore }>;
  const chosen = store(value);
  if (chosen.kind === 'postgres' && values['key-prefix'] !== undefined) {
    throw new UsageError('--key-prefix is for Redis; on PostgreSQL, --table');
  }
  if (chosen.kind === 'redis' && values.table !== undefined) {
    throw new UsageError('--table is for PostgreSQL; on Redis, --key-prefix');
  }
  return chosen;
}

/** One `pg` connection, bounded waits: a script must not hang on a database that does not answer. */
async function openPostgres(url: string, table = DEFAULT_TABLE_NAME): Promise<OperatorSession> {
  // Loaded only here: an application on Redis may not have pg.
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000, query_timeout: 60_000 });
  client.on('error', () => undefined); // a connection lost mid-command fails its query, reported by the caller
  await client.connect();
  const query: OperatorQuery = async (text, values) => (await client.query<Record<string, unknown>>(text, values)).rows;
  return { operator: new IdempotencyOperator(query, table), close: () => client.end() };
}

/**
 * One ioredis client (a Cluster's, from `host:port,...`) that tries once and bounds each command, as the `pg` one: a
 * script must not hang on a Redis that does not answer.
 */
async function openRedis(at: Extract<RecordsStore, { kind: 'redis' }>['at'], values: Values): Promise<OperatorSession> {
  // Loaded only here: an application on PostgreSQL may not have ioredis.
  const { Cluster, Redis } = await import('ioredis');
  const { RedisIdempotencyOperator } = await import('../redis/redis-operator.js');
  const options = {
    lazyConnect: true,
    connectTimeout: 10_000,
    commandTimeout: 60_000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  };
  const client =
    'clusterNodes' in at
      ? new Cluster(at.clusterNodes, {
          lazyConnect: true,
          clusterRetryStrategy: () => null,
          redisOptions: options,
        })
      : new Redis(at.url, options);
  client.on('error', () => undefined); // a connection lost mid-command fails its command, reported by the caller
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw error;
  }
  return {
    operator: new RedisIdempotencyOperator(client, { keyPrefix: values['key-prefix'] }),
    close: () =>
      client.quit().then(
        () => undefined,
        () => client.disconnect(),
      ),
  };
}

/** `host:port,host:port` as ioredis' startup nodes; refused unless each has both. */
function clusterNodeAddresses(nodes: string): Array<{ host: string; port: number }> {
  return nodes.split(',').map((node) => {
    const [, host, port] = /^\s*(.+):(\d+)\s*$/.exec(node) ?? [];
    if (host === undefined)
      throw new UsageError(`the Redis Cluster's nodes are host:port,host:port,...: not '${node}'`);
    return { host, port: Number(port) };
  });
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function checkCommand(command: string, values: Values): void {
  const required: Record<string, (keyof Values)[]> = {
    inspect: ['key'],
    stuck: [],
    release: ['account', 'endpoint', 'key', 'attempt'],
    purge: [],
  };
  const needed = required[command];
  if (needed === undefined) throw new UsageError(`unknown command '${command}'`);
  if (command === 'release' && values.attempt === undefined) {
    throw new UsageError(
      'release needs --attempt: the attempt token that `nest-idempotency inspect --key K` shows for the record. ' +
        'The record is released only if that attempt still holds it.',
    );
  }
  const missing = needed.filter((name) => values[name] === undefined);
  if (missing.length > 0) throw new UsageError(`${command} needs ${missing.map((name) => `--${name}`).join(', ')}`);
  // An attempt token is a UUID (a UUID column on PostgreSQL): a malformed one is the caller's mistake, not the store's.
  if (values.attempt !== undefined && !UUID.test(values.attempt)) {
    throw new UsageError('--attempt must be the attempt token (a UUID) that `nest-idempotency inspect` shows');
  }
  for (const name of ['limit', 'batch-size'] as const) {
    const value = values[name];
    if (value !== undefined && !/^[1-9][0-9]*$/.test(value))
      throw new UsageError(`--${name} must be a positive integer`);
  }
}

async function runCommand(
  command: string,
  values: Values,
  operator: IdempotencyOperations,
  io: CliIo,
): Promise<number> {
  const json = values.json === true;
  const limit = values.limit === undefined ? undefined : Number(values.limit);
  const now = new Date();
  const showRecords = (records: OperatorRecord[], none: string) => {
    if (json) io.out(JSON.stringify(records.map(recordJson), null, 2));
    else io.out(records.length === 0 ? none : records.map((record) => describeRecord(record, now)).join('\n\n'));
  };
  switch (command) {
    case 'inspect': {
      const match = { key: values.key as string, account: values.account, endpoint: values.endpoint };
      const records = await operator.find(match, { body: values.body === true, limit });
      showRecords(records, 'No record matches.');
      return records.length === 0 ? EXIT.notDone : EXIT.done;
    }
    case 'stuck': {
      showRecords(await operator.stuck({ limit }), 'No record is stuck in progress.');
      return EXIT.done;
    }
    case 'release': {
      const scope = {
        account: values.account as string,
        endpoint: values.endpoint as string,
        key: values.key as string,
      };
      const result = await operator.release(scope, values.attempt as string);
      if (json) io.out(JSON.stringify({ ...result, record: result.record && recordJson(result.record) }, null, 2));
      else
        io.out([describeRelease(result), ...(result.record ? [describeRecord(result.record, now)] : [])].join('\n\n'));
      return result.outcome === 'released' ? EXIT.done : EXIT.notDone;
    }
    default: {
      const purged = await operator.purgeExpired(
        values['batch-size'] === undefined ? undefined : Number(values['batch-size']),
      );
      io.out(json ? JSON.stringify({ purged }) : `Purged ${purged} expired record${purged === 1 ? '' : 's'}.`);
      return EXIT.done;
    }
  }
}
