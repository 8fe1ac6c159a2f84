import type { Client, ClientConfig } from 'pg';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';

/** node-postgres's `Client` class, as TypeORM loaded it. */
export type ClientClass = new (config: ClientConfig) => Client;

/** How many times the two sessions of `sharedBackend` each ask for their backend. */
const PROBE_ROUNDS = 3;
/** How long the check waits for a session, and for each statement, at most. */
const PROBE_TIMEOUT_MS = 5_000;

/**
 * The backend two sessions opened at once with `config` both ran a statement on, if they did: on PostgreSQL itself
 * two open sessions are two backends, so one shared backend proves a transaction (or statement) pooler in between,
 * which hands a server connection to whichever client runs a statement. PgBouncer 1.18 gives an idle client's server
 * connection to the next client by default (`server_round_robin = 0`), so it shows; a pooler that picks another
 * server connection does not, and is named later, by the first statement it breaks (`namedStatementFailure`).
 */
export async function sharedBackend(Client: ClientClass, config: ClientConfig): Promise<number | undefined> {
  // Bounded, so that a server that takes the sessions and never answers (a session pooler out of server connections)
  // cannot hold the start: past it, the check is skipped with a warning (see `PostgresIdempotencyStore.checkSchema`).
  const bounded = { connectionTimeoutMillis: PROBE_TIMEOUT_MS, query_timeout: PROBE_TIMEOUT_MS, ...config };
  const sessions = [new Client(bounded), new Client(bounded)];
  // A session cut while it is idle reports 'error' to the client; without a listener, the process would crash.
  for (const session of sessions) session.on('error', () => undefined);
  try {
    for (const session of sessions) await session.connect();
    for (let round = 0; round < PROBE_ROUNDS; round += 1) {
      const [first, second] = [await backendOf(sessions[0]), await backendOf(sessions[1])];
      if (first === second) return first;
    }
    return undefined;
  } finally {
    await Promise.allSettled(sessions.map((session) => session.end()));
  }
}

async function backendOf(session: Client): Promise<number> {
  const { rows } = await session.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return rows[0].pid;
}

const FIX =
  'pass `transactionPooler: true` to IdempotencyPostgresModule.forRoot() (unnamed statements; waits for in-flight ' +
  'outcomes poll the record, or LISTEN on `listenConnection`, a connection straight to PostgreSQL)';

/** The start-up refusal of a data source that goes through a transaction pooler, without `transactionPooler: true`. */
export function dataSourceBehindPoolerError(backend: number): IdempotencySetupError {
  return new IdempotencySetupError(
    `The idempotency store's data source goes through a transaction pooler (PgBouncer in transaction mode?): two ` +
      `of its sessions ran on one PostgreSQL backend (pid ${backend}), so named prepared statements and LISTEN ` +
      `would land on server connections other clients share. ${capitalized(FIX)}.`,
  );
}

/** The start-up refusal of a `listenConnection` that goes through a transaction pooler. */
export function listenConnectionBehindPoolerError(backend: number): IdempotencySetupError {
  return new IdempotencySetupError(
    `The idempotency store's listenConnection goes through a transaction pooler: two of its sessions ran on one ` +
      `PostgreSQL backend (pid ${backend}), so its LISTEN would stay on a server connection other clients share ` +
      `and miss the outcomes. Give listenConnection a connection straight to PostgreSQL (its host and port, not ` +
      `the pooler's), or leave it out: waits then poll the record.`,
  );
}

/**
 * The error of a named prepared statement that met another client's (or missed its own) on a server connection a
 * transaction pooler shares, saying so and naming the fix; undefined for any other error.
 */
export function namedStatementFailure(error: unknown): Error | undefined {
  const message = error instanceof Error ? error.message : '';
  if (!/prepared statement "[^"]*" (already exists|does not exist)/.test(message)) return undefined;
  return new Error(
    `${message}: the idempotency store's connections seem to go through a transaction pooler (PgBouncer in ` +
      `transaction mode before 1.21, or without max_prepared_statements), which moves named prepared statements ` +
      `between clients: ${FIX}`,
    { cause: error },
  );
}

function capitalized(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
