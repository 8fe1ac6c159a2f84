import { parseArgs } from 'node:util';
import pg from 'pg';
import { IdempotencyOperator, type OperatorQuery } from '../postgres/idempotency-operator.js';
import { DEFAULT_TABLE_NAME } from '../postgres/postgres-options.js';
import { describeRecord, describeRelease, recordJson } from './operator-output.js';

/** The command's exit codes, for scripts. */
export const EXIT = {
  /** Done: a record shown, a list shown (even empty), a key released, a purge run. */
  done: 0,
  /** Nothing matched (`inspect`), or the key was not released (`release`). */
  notDone: 1,
  /** The command line was wrong: an unknown command or option, a missing one, `release` without `--attempt`. */
  usage: 2,
  /** The database could not be reached, or refused the statement (a table that does not exist). */
  database: 3,
} as const;

export const USAGE = `Usage: nest-idempotency <command> [options]

Commands:
  inspect --key K [--account A] [--endpoint E] [--body]
                  The records of key K (in every account and endpoint unless given): state, attempt, lease, expiry,
                  the stored status and body size. The stored body only with --body.
  stuck           The records in progress that no live attempt holds (past their lease, or whose holder
                  transaction has ended), oldest first.
  release --account A --endpoint E --key K --attempt T
                  Deletes the in-progress record of that scope if attempt T (as inspect shows it) still holds it.
                  A retry then runs the handler again, even if the attempt T still runs somewhere.
  purge [--batch-size N]
                  Deletes every expired record now, N at a time (default 1000).

Options:
  --database-url URL   The database (default: the DATABASE_URL environment variable)
  --table NAME         The records table, optionally schema-qualified (default ${DEFAULT_TABLE_NAME})
  --limit N            At most N records (inspect, stuck; default 100)
  --json               JSON on stdout, for scripts
  --help               This help

Exit codes: 0 done; 1 nothing matched or not released; 2 usage error; 3 database unreachable or failing.`;

const OPTIONS = {
  'database-url': { type: 'string' },
  table: { type: 'string' },
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
  const databaseUrl = values['database-url'] ?? io.env.DATABASE_URL;
  if (!databaseUrl) {
    io.err('nest-idempotency: no database: set DATABASE_URL or give --database-url');
    return EXIT.usage;
  }
  // One connection, bounded waits: a script must not hang on a database that does not answer.
  const client = new pg.Client({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 10_000,
    query_timeout: 60_000,
  });
  client.on('error', () => undefined); // a connection lost mid-command fails its query, reported below
  try {
    await client.connect();
  } catch (error) {
    io.err(`nest-idempotency: the database could not be reached: ${(error as Error).message}`);
    return EXIT.database;
  }
  try {
    const query: OperatorQuery = async (text, values) =>
      (await client.query<Record<string, unknown>>(text, values)).rows;
    return await runCommand(command, values, new IdempotencyOperator(query, values.table ?? DEFAULT_TABLE_NAME), io);
  } catch (error) {
    io.err(`nest-idempotency: the database refused ${command}: ${(error as Error).message}`);
    return EXIT.database;
  } finally {
    await client.end().catch(() => undefined);
  }
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
  // An attempt token is a UUID column: a malformed one is the caller's mistake, not the database's (exit 3).
  if (values.attempt !== undefined && !UUID.test(values.attempt)) {
    throw new UsageError('--attempt must be the attempt token (a UUID) that `nest-idempotency inspect` shows');
  }
  for (const name of ['limit', 'batch-size'] as const) {
    const value = values[name];
    if (value !== undefined && !/^[1-9][0-9]*$/.test(value))
      throw new UsageError(`--${name} must be a positive integer`);
  }
}

async function runCommand(command: string, values: Values, operator: IdempotencyOperator, io: CliIo): Promise<number> {
  const json = values.json === true;
  const limit = values.limit === undefined ? undefined : Number(values.limit);
  const now = new Date();
  const showRecords = (records: Awaited<ReturnType<IdempotencyOperator['stuck']>>, none: string) => {
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
