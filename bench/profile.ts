import 'reflect-metadata';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';
import { spawnTypeScriptServer } from '../test/support/sample-app.js';
import { createTestDatabase } from '../test/support/test-database.js';
import { type CpuProfile, formatSummary, summarize } from './profile-summary.js';

/**
 * `npm run bench:profile`: the bench app under `node --cpu-prof`, loaded with new keys at 64 connections on one
 * route (or with replays of completed keys), and a summary of the profile's measured window (after the warm-up). See
 * bench/README.md, "Profile". Settings: BENCH_PROFILE_ROUTE (`standard`, `transactional`, `baseline`, or `replays`:
 * `standard`'s route with REPLAY_KEYS keys in turn, completed by the warm-up; default `standard`),
 * BENCH_PROFILE_SECONDS (default 20), BENCH_PROFILE_DIR (where the `.cpuprofile` is kept; default a temporary folder),
 * BENCH_PLATFORM (as for the bench app).
 */
const ROUTE = process.env.BENCH_PROFILE_ROUTE ?? 'standard';
const SECONDS = Number(process.env.BENCH_PROFILE_SECONDS ?? 20);
const WARM_UP_SECONDS = 8;
const CONNECTIONS = 64;
const REPLAY_KEYS = 500;
const PROFILED_ROUTES = ['standard', 'transactional', 'baseline', 'replays'];

/** The key of each request: none on the baseline, one of REPLAY_KEYS in turn for replays, else a new one. */
let sent = 0;
const keyOfNextRequest = (): string | undefined =>
  ROUTE === 'baseline' ? undefined : ROUTE === 'replays' ? `replay-profile-${sent++ % REPLAY_KEYS}` : randomUUID();

async function load(url: string, seconds: number): Promise<autocannon.Result> {
  return autocannon({
    url,
    method: 'POST',
    connections: CONNECTIONS,
    duration: seconds,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1200 }),
    requests: [
      {
        setupRequest: (request) => {
          const key = keyOfNextRequest();
          return key === undefined ? request : { ...request, headers: { ...request.headers, 'idempotency-key': key } };
        },
      },
    ],
  });
}

/** The profiler's clock: V8 stamps samples with the monotonic clock in microseconds, as `hrtime` reads it. */
const profilerNow = () => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  if (!PROFILED_ROUTES.includes(ROUTE))
    throw new Error(`BENCH_PROFILE_ROUTE must be one of ${PROFILED_ROUTES.join(', ')}, got ${JSON.stringify(ROUTE)}`);
  const dir = process.env.BENCH_PROFILE_DIR ?? mkdtempSync(join(tmpdir(), 'idempotency-profile-'));
  const database = await createTestDatabase();
  try {
    const app = await spawnTypeScriptServer('bench/bench-app.ts', { DATABASE_URL: database.url }, [
      '--cpu-prof',
      `--cpu-prof-dir=${dir}`,
    ]);
    try {
      const url = `${app.url}/bench/${ROUTE === 'replays' ? 'standard' : ROUTE}`;
      console.log(`Warming up ${url} for ${WARM_UP_SECONDS} s, then profiling it for ${SECONDS} s…`);
      await load(url, WARM_UP_SECONDS);
      const from = profilerNow();
      const result = await load(url, SECONDS);
      const to = profilerNow();
      // The profile is written as the process exits: the bench app closes and exits on SIGTERM.
      const exited = once(app.child, 'exit');
      app.child.kill('SIGTERM');
      await exited;
      // `CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile`: the main thread's (0), not the module loader's thread's.
      const file = readdirSync(dir).find(
        (name) => name.includes(`.${app.child.pid}.0.`) && name.endsWith('.cpuprofile'),
      );
      if (!file) throw new Error(`no .cpuprofile in ${dir}`);
      const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as CpuProfile;
      console.log(
        `${ROUTE} @${CONNECTIONS}: ${result.requests.average.toFixed(0)} req/s, ${result.requests.total} requests,` +
          ` non-2xx ${result.non2xx}; profile ${join(dir, file)} (window ${from}-${to} µs)\n`,
      );
      console.log(formatSummary(summarize(profile, { from, to }), 25, result.requests.total));
    } finally {
      await app.close();
    }
  } finally {
    await database.drop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
