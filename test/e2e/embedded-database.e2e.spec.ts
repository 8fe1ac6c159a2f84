import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { type EmbeddedDatabase, freePort, startEmbeddedDatabase } from '../../sample-app/embedded-database.js';

/** The data folder of the server at `url`, as that server reports it. */
async function dataDirectoryOf(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ data_directory: string }>('SHOW data_directory');
    return rows[0].data_directory;
  } finally {
    await client.end();
  }
}

const portOf = (url: string) => Number(new URL(url).port);

// `npm start` keeps its data in .data/postgres; here a folder under the system temp dir stands for it, which the
// unprivileged postgres user can reach when the tests run as root.
let folder: string;
let own: EmbeddedDatabase | undefined;

beforeAll(() => {
  folder = realpathSync(mkdtempSync(join(tmpdir(), 'idempotency-embedded-test-')));
});

afterAll(async () => {
  await own?.stop();
  rmSync(folder, { recursive: true, force: true });
});

/** Starts the embedded server with `takenPort` taken by another: it starts its own on another port, and says so. */
async function expectOwnServerBeside(takenPort: number): Promise<void> {
  own = await startEmbeddedDatabase(folder, takenPort, true);
  const port = portOf(own.url);
  expect(port).not.toBe(takenPort);
  expect(own.description).toBe(
    `port ${takenPort} is taken by another server: embedded PostgreSQL started on port ${port} with data folder ${folder}`,
  );
  await expect(dataDirectoryOf(own.url)).resolves.toBe(folder);
}

describe('the embedded PostgreSQL of npm start', () => {
  it('does not use another PostgreSQL answering on its port: it starts its own on a free port, and says so', async () => {
    // The suite's own server (the machine's, or the one global setup started) is another checkout's server here.
    await expectOwnServerBeside(portOf(process.env.DATABASE_URL as string));
  });

  it('reuses its own running server, on whichever port it listens, and leaves it running when done with it', async () => {
    const port = portOf((own as EmbeddedDatabase).url);
    const reused = await startEmbeddedDatabase(folder, await freePort(), true);
    expect(reused.url).toBe(own?.url);
    expect(reused.description).toBe(
      `embedded PostgreSQL of data folder ${folder}, already running on port ${port}: reused`,
    );
    await reused.stop();
    await expect(dataDirectoryOf(reused.url)).resolves.toBe(folder);
  });

  it('does not take a port that any other server listens on, and starts on a free one', async () => {
    await own?.stop();
    own = undefined;
    const other = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    try {
      await expectOwnServerBeside((other.address() as { port: number }).port);
    } finally {
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
  });
});
