import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import type { IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import { newRedisClient, redis, REDIS_URL, redisCluster } from '../support/redis.js';
import { useRedisCluster } from '../support/redis-cluster.js';
import { describeWith } from '../support/required-service.js';
import { postCharge, type RunningApp, spawnSampleApp, type SpawnedApp, startSampleApp } from '../support/sample-app.js';
import { stopProcess } from '../support/spawned-processes.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

/**
 * `nest-idempotency` run as a process, as the package ships it (`dist/cli/main.js`, built by `npm run build`'s
 * compiler settings into a folder of the test's, beside the repository's node_modules), on records made by real sample apps: a charge completed, one
 * expired, one running in a live process (its holder transaction open), and the records of two processes SIGKILLed
 * mid-charge, one in standard mode (its lease lapses) and one in transactional mode (its holder transaction ended).
 * Then on Redis (REDIS_URL, and a Redis Cluster's REDIS_CLUSTER_NODES), on records its store wrote.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ENDPOINT = 'POST /v1/charges';
const CHARGE = { amount: 1200, currency: 'eur' };

interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

let db: TestDatabase;
let build: string;

function cli(args: string[], env: Record<string, string | undefined> = { DATABASE_URL: db.url }): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(build, 'dist/cli/main.js'), ...args],
      { cwd: build, env: { PATH: process.env.PATH, ...env }, timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
    );
  });
}

async function json<T>(args: string[], env?: Record<string, string | undefined>): Promise<{ code: number; value: T }> {
  const run = await cli([...args, '--json'], env);
  expect(run.stderr).toBe('');
  return { code: run.code, value: JSON.parse(run.stdout) as T };
}

interface Shown {
  account: string;
  endpoint: string;
  key: string;
  state: string;
  status: string;
  attempt: string;
  attempts: number;
  holderTransaction: boolean;
  responseStatus: number | null;
  bodyBytes: number | null;
  steps: string[];
  body?: string;
  bodyEncoding?: string;
}

beforeAll(async () => {
  build = await mkdtemp(join(tmpdir(), 'nest-idempotency-cli-'));
  await symlink(join(ROOT, 'node_modules'), join(build, 'node_modules'));
  const compiler = join(ROOT, 'node_modules/typescript/bin/tsc');
  await promisify(execFile)(
    process.execPath,
    [compiler, '-p', 'tsconfig.build.json', '--outDir', join(build, 'dist')],
    {
      cwd: ROOT,
    },
  );
}, 120_000);

afterAll(async () => {
  if (build) await rm(build, { recursive: true, force: true });
});

describe('the operator command-line tool, as a process, on records of real apps', () => {
  let app: RunningApp;
  let shortLived: RunningApp;
  /** In standard mode: a step's recovery point commits on its own, and outlives a release (a 503). */
  let standard: RunningApp;
  const doomed: SpawnedApp[] = [];
  const account = `sk_test_operator_${randomUUID().slice(0, 8)}`;
  const keys = {
    completed: `completed-${randomUUID()}`,
    expired: `expired-${randomUUID()}`,
    holder: `holder-${randomUUID()}`,
    leased: `leased-${randomUUID()}`,
  };

  beforeAll(async () => {
    db = await createTestDatabase();
    app = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 4 });
    shortLived = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 4, ttlSeconds: 1 });
    standard = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 4, transactional: false });
    // Each charges through a provider that never answers within the test: the record stays in progress.
    const holder = await spawnSampleApp({
      DATABASE_URL: db.url,
      PROVIDER_DELAY_MS: '600000',
      IDEMPOTENCY_LEASE_SECONDS: '30',
    });
    doomed.push(holder);
    const leased = await spawnSampleApp({
      DATABASE_URL: db.url,
      PROVIDER_DELAY_MS: '600000',
      IDEMPOTENCY_LEASE_SECONDS: '1',
      IDEMPOTENCY_TRANSACTIONAL: 'false',
    });
    doomed.push(leased);
    // In standard mode, whose steps are recorded (a transactional request's commit with it, and are not).
    expect((await postCharge(standard.url, CHARGE, keys.completed, account)).status).toBe(201);
    expect((await postCharge(shortLived.url, CHARGE, keys.expired, account)).status).toBe(201);
    void postCharge(holder.url, CHARGE, keys.holder, account).catch(() => undefined);
    void postCharge(leased.url, CHARGE, keys.leased, account).catch(() => undefined);
    // The claims; in standard mode, the first step recorded too (it waits for the provider inside the second).
    for (const [key, recorded] of [
      [keys.holder, 'true'],
      [keys.leased, 'steps IS NOT NULL'],
    ]) {
      await waitFor(
        async () =>
          (await db.query(`SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND ${recorded}`, [key]))[0],
        `the claim of ${key}`,
      );
    }
  }, 180_000);

  afterAll(async () => {
    for (const process of doomed) await stopProcess(process.child);
    await app?.close();
    await shortLived?.close();
    await standard?.close();
    await db?.drop();
  });

  it('answers --help with 0, a usage error with 2, a database it cannot reach with 3', async () => {
    const help = await cli(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Exit codes: 0 done; 1 nothing matched or not released; 2 usage error; 3');
    const unknown = await cli(['frobnicate']);
    expect(unknown).toMatchObject({ code: 2, stdout: '' });
    expect(unknown.stderr).toContain("unknown command 'frobnicate'");
    expect((await cli(['inspect'])).stderr).toContain('inspect needs --key');
    expect((await cli(['stuck', '--limit', 'many'])).code).toBe(2);
    const noDatabase = await cli(['stuck'], {});
    expect(noDatabase).toMatchObject({ code: 2 });
    expect(noDatabase.stderr).toContain('set DATABASE_URL or give --database-url');
    const unreachable = await cli(['stuck', '--database-url', 'postgres://postgres@127.0.0.1:1/postgres']);
    expect(unreachable.code).toBe(3);
    expect(unreachable.stderr).toContain('the database could not be reached');
    const noTable = await cli(['stuck', '--table', 'billing.no_such_table']);
    expect(noTable.code).toBe(3);
    expect(noTable.stderr).toContain('relation "billing.no_such_table" does not exist');
  });

  it('refuses to release without the attempt it was shown, and says where to find it', async () => {
    const run = await cli(['release', '--account', account, '--endpoint', ENDPOINT, '--key', keys.holder]);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('release needs --attempt');
    expect(run.stderr).toContain('nest-idempotency inspect --key K');
    const malformed = await cli([
      'release',
      '--account',
      account,
      '--endpoint',
      ENDPOINT,
      '--key',
      keys.holder,
      '--attempt',
      'not-a-uuid',
    ]);
    expect(malformed.code).toBe(2); // the caller's mistake, not the database's
    expect(malformed.stderr).toContain('--attempt must be the attempt token (a UUID)');
  });

  it('inspects a completed record without its body, shows the body only with --body and says so', async () => {
    const { code, value } = await json<Shown[]>(['inspect', '--key', keys.completed]);
    expect(code).toBe(0);
    expect(value).toEqual([
      expect.objectContaining({
        account,
        endpoint: ENDPOINT,
        key: keys.completed,
        state: 'completed',
        status: 'completed',
        attempts: 1,
        responseStatus: 201,
        // The charge's four steps, their names kept by its completed record (their results dropped).
        steps: ['create-charge', 'charge-card', 'record-result', 'send-receipt'],
      }),
    ]);
    expect(value[0].bodyBytes).toBeGreaterThan(0);
    expect(value[0]).not.toHaveProperty('body');

    const human = await cli(['inspect', '--key', keys.completed, '--account', account, '--endpoint', ENDPOINT]);
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^state {4}completed \(completed: its outcome is replayed\)$/m);
    expect(human.stdout).toMatch(/^steps {4}create-charge, charge-card, record-result, send-receipt \(4\)$/m);
    expect(human.stdout).toContain('(not shown; --body shows it)');
    expect(human.stdout).not.toContain('"amount"');

    const withBody = await cli(['inspect', '--key', keys.completed, '--body']);
    expect(withBody.stdout).toContain('body (shown because --body was given):');
    expect(withBody.stdout).toContain('"amount":1200');
    const body = (await json<Shown[]>(['inspect', '--key', keys.completed, '--body'])).value[0];
    expect(body.bodyEncoding).toBe('base64');
    expect(JSON.parse(Buffer.from(body.body as string, 'base64').toString('utf8'))).toMatchObject(CHARGE);
  });

  it("keeps the sample app's operator routes off without OPERATOR_TOKEN", async () => {
    const response = await request(app.url).get('/operator/records').set('X-Operator-Token', '');
    expect(response.status).toBe(404);
    expect(response.body.error.code).toBe('operator_view_off');
  });

  it('answers 1 when no record matches', async () => {
    const run = await cli(['inspect', '--key', `nothing-${randomUUID()}`]);
    expect(run).toMatchObject({ code: 1, stdout: 'No record matches.\n' });
    expect((await cli(['inspect', '--key', keys.completed, '--account', 'sk_test_someone_else'])).code).toBe(1);
  });

  it("shows a live transactional attempt as running, holding its key's lock, and leaves it out of stuck", async () => {
    const [record] = (await json<Shown[]>(['inspect', '--key', keys.holder])).value;
    expect(record).toMatchObject({ state: 'running', status: 'in_progress', holderTransaction: true });
    const stuck = (await json<Shown[]>(['stuck'])).value.map((shown) => shown.key);
    expect(stuck).not.toContain(keys.holder);
  });

  it('lists the keys of killed processes as stuck (holder gone at once, lease lapsed once it has), and releases one fenced on its attempt', async () => {
    for (const process of doomed.splice(0)) await stopProcess(process.child);
    const stuck = await waitFor(async () => {
      const shown = (await json<Shown[]>(['stuck'])).value;
      return shown.length === 2 ? shown : undefined;
    }, 'both killed attempts to be stuck');
    expect(stuck).toEqual(
      expect.arrayContaining([
        // Killed inside its second step: in transactional mode no step is recorded (they commit with the request's
        // transaction, which died); in standard mode the first is the recovery point.
        expect.objectContaining({ key: keys.holder, state: 'holder-gone', holderTransaction: true, steps: [] }),
        expect.objectContaining({
          key: keys.leased,
          state: 'lease-lapsed',
          holderTransaction: false,
          steps: ['create-charge'],
        }),
      ]),
    );
    expect((await cli(['inspect', '--key', keys.leased])).stdout).toMatch(/^steps {4}create-charge \(1\)$/m);
    expect((await cli(['inspect', '--key', keys.holder])).stdout).toMatch(/^steps {4}-$/m);
    const held = stuck.find((shown) => shown.key === keys.holder) as Shown;
    const scope = ['--account', account, '--endpoint', ENDPOINT, '--key', keys.holder];

    const wrong = await json<{ outcome: string; record: Shown }>(['release', ...scope, '--attempt', randomUUID()]);
    expect(wrong).toMatchObject({ code: 1, value: { outcome: 'other-attempt', record: { attempt: held.attempt } } });
    const completed = (await json<Shown[]>(['inspect', '--key', keys.completed])).value[0];
    const completedScope = ['--account', account, '--endpoint', ENDPOINT, '--key', keys.completed];
    const notCompleted = await cli(['release', ...completedScope, '--attempt', completed.attempt]);
    expect(notCompleted.code).toBe(1);
    expect(notCompleted.stdout).toContain('the record was completed meanwhile; a completed record is never released');

    const released = await cli(['release', ...scope, '--attempt', held.attempt]);
    expect(released).toMatchObject({ code: 0, stdout: 'Released: the next request with this key runs the handler.\n' });
    expect((await json(['release', ...scope, '--attempt', held.attempt])).value).toEqual({ outcome: 'not-found' });
    // The key is free: its retry runs the handler, rather than replaying or answering 409.
    const retry = await postCharge(app.url, CHARGE, keys.holder, account);
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replay']).toBeUndefined();
    expect((await json<Shown[]>(['stuck'])).value.map((shown) => shown.key)).toEqual([keys.leased]);
  });

  it('shows a record released with its steps (a 503 in standard mode) as stuck with them, and releases it, steps and all, fenced on the token shown', async () => {
    const key = `provider-down-${randomUUID()}`;
    const down = await postCharge(standard.url, { ...CHARGE, source: 'tok_providerDown' }, key, account);
    expect(down.status).toBe(503);
    // Kept for the same request to resume after its charge row: its lease ended, a token of its own.
    const [kept] = (await json<Shown[]>(['inspect', '--key', key])).value;
    expect(kept).toMatchObject({ state: 'lease-lapsed', status: 'in_progress', steps: ['create-charge'] });
    expect((await json<Shown[]>(['stuck'])).value.find((shown) => shown.key === key)).toEqual(kept);
    const human = await cli(['inspect', '--key', key]);
    expect(human.stdout).toMatch(/^state {4}lease-lapsed /m);
    expect(human.stdout).toMatch(/^steps {4}create-charge \(1\)$/m);
    // Another request of the key is refused while the record stands: the key reused for another request.
    expect((await postCharge(standard.url, { ...CHARGE, amount: 1300 }, key, account)).status).toBe(422);

    const scope = ['--account', account, '--endpoint', ENDPOINT, '--key', key];
    const wrong = await json<{ outcome: string; record: Shown }>(['release', ...scope, '--attempt', randomUUID()]);
    expect(wrong).toMatchObject({ code: 1, value: { outcome: 'other-attempt', record: { attempt: kept.attempt } } });
    const released = await cli(['release', ...scope, '--attempt', kept.attempt]);
    expect(released).toMatchObject({ code: 0, stdout: 'Released: the next request with this key runs the handler.\n' });
    expect((await cli(['inspect', '--key', key])).code).toBe(1);
    // Steps and all: another request of the key is a new claim, charged from its first step.
    const next = await postCharge(standard.url, { ...CHARGE, amount: 1300 }, key, account);
    expect(next.status).toBe(201);
    expect(next.headers['idempotent-replay']).toBeUndefined();
    expect((await json<Shown[]>(['inspect', '--key', key])).value[0]).toMatchObject({
      state: 'completed',
      attempts: 1,
    });
  });

  it('purges expired records now and says how many, on a schema-qualified table name', async () => {
    await waitFor(async () => {
      const [record] = (await json<Shown[]>(['inspect', '--key', keys.expired])).value;
      return record.state === 'expired' ? record : undefined;
    }, 'the short-lived record to expire');
    const purged = await cli(['purge', '--table', 'public.idempotency_records', '--batch-size', '1']);
    expect(purged).toMatchObject({ code: 0, stdout: 'Purged 1 expired record.\n' });
    expect((await cli(['inspect', '--key', keys.expired])).code).toBe(1);
    expect((await json(['purge'])).value).toEqual({ purged: 0 });
  });
});

/** What the store's records on Redis answer to, as the sample app's charges do. */
const REDIS_OUTCOME: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(JSON.stringify({ id: 'ch_1', ...CHARGE })),
};

/** A record of `scope` claimed on `store` (its lease lapsed at once, or of a minute), completed if asked; its attempt. */
async function claimOnRedis(
  store: RedisIdempotencyStore,
  scope: IdempotencyScope,
  state: 'lease-lapsed' | 'running' | 'completed',
): Promise<string> {
  const attempt = randomUUID();
  const timing = { leaseSeconds: state === 'lease-lapsed' ? 0.001 : 60, ttlSeconds: 3600 };
  await store.claim(scope, 'fp', attempt, timing);
  if (state === 'completed') await store.complete({ scope, attempt }, REDIS_OUTCOME, timing.ttlSeconds);
  return attempt;
}

describeWith(redis, 'the operator command-line tool on Redis (REDIS_URL), on records of the Redis store', () => {
  const keyPrefix = `test:${randomBytes(4).toString('hex')}:cli:`;
  const onRedis = { REDIS_URL };
  const withPrefix = ['--key-prefix', keyPrefix];
  const account = 'sk_test_redis';
  const scopes = {
    completed: { account, endpoint: ENDPOINT, key: `completed-${randomUUID()}` },
    lapsed: { account, endpoint: ENDPOINT, key: `lapsed-${randomUUID()}` },
    running: { account, endpoint: ENDPOINT, key: `running-${randomUUID()}` },
  };
  const attempts: Record<keyof typeof scopes, string> = { completed: '', lapsed: '', running: '' };
  let client: Redis;

  beforeAll(async () => {
    client = newRedisClient();
    const store = new RedisIdempotencyStore(client, { keyPrefix });
    for (const state of ['completed', 'lapsed', 'running'] as const) {
      attempts[state] = await claimOnRedis(store, scopes[state], state === 'lapsed' ? 'lease-lapsed' : state);
    }
  });

  afterAll(() => client?.quit());

  const scopeArgs = ({ account, endpoint, key }: IdempotencyScope) => [
    '--account',
    account,
    '--endpoint',
    endpoint,
    '--key',
    key,
    ...withPrefix,
  ];

  it('inspects a completed record under its key prefix, its body only with --body; none under the default prefix', async () => {
    const { code, value } = await json<Shown[]>(['inspect', '--key', scopes.completed.key, ...withPrefix], onRedis);
    expect(code).toBe(0);
    expect(value).toEqual([
      expect.objectContaining({
        ...scopes.completed,
        state: 'completed',
        attempt: attempts.completed,
        holderTransaction: false,
        responseStatus: 201,
        bodyBytes: REDIS_OUTCOME.body.length,
      }),
    ]);
    expect(value[0]).not.toHaveProperty('body');
    const withBody = await cli(['inspect', '--key', scopes.completed.key, '--body', ...withPrefix], onRedis);
    expect(withBody.stdout).toContain('"amount":1200');
    expect((await cli(['inspect', '--key', scopes.completed.key], onRedis)).code).toBe(1);
  });

  it('lists the record past its lease as stuck, not the running one, and releases it fenced on its attempt', async () => {
    const stuck = (await json<Shown[]>(['stuck', ...withPrefix], onRedis)).value;
    expect(stuck.map(({ key, state }) => [key, state])).toEqual([[scopes.lapsed.key, 'lease-lapsed']]);

    const wrong = await json<{ outcome: string }>(
      ['release', ...scopeArgs(scopes.lapsed), '--attempt', randomUUID()],
      onRedis,
    );
    expect(wrong).toMatchObject({ code: 1, value: { outcome: 'other-attempt' } });
    const completed = await cli(['release', ...scopeArgs(scopes.completed), '--attempt', attempts.completed], onRedis);
    expect(completed.code).toBe(1);
    expect(completed.stdout).toContain('a completed record is never released');
    const released = await cli(['release', ...scopeArgs(scopes.lapsed), '--attempt', attempts.lapsed], onRedis);
    expect(released).toMatchObject({ code: 0, stdout: 'Released: the next request with this key runs the handler.\n' });
    expect((await json(['release', ...scopeArgs(scopes.lapsed), '--attempt', attempts.lapsed], onRedis)).value).toEqual(
      { outcome: 'not-found' },
    );
    expect((await json<Shown[]>(['stuck', ...withPrefix], onRedis)).value).toEqual([]);
    expect(await cli(['purge', ...withPrefix], onRedis)).toMatchObject({
      code: 0,
      stdout: 'Purged 0 expired records.\n',
    });
  });

  it('shows a record released with its steps, held by its release token, and releases it with that token, steps and all', async () => {
    const store = new RedisIdempotencyStore(client, { keyPrefix });
    const scope = { account, endpoint: ENDPOINT, key: `steps-${randomUUID()}` };
    const attempt = await claimOnRedis(store, scope, 'running');
    for (const name of ['create-charge', 'charge-card']) {
      expect(await store.recordStep({ scope, attempt }, { name, result: '{"secret":true}' })).toBe(true);
    }
    expect(await store.release({ scope, attempt })).toBe(true);
    const shown = (await json<Shown[]>(['inspect', '--key', scope.key, ...withPrefix], onRedis)).value;
    expect(shown).toEqual([
      expect.objectContaining({ state: 'lease-lapsed', steps: ['create-charge', 'charge-card'] }),
    ]);
    const token = shown[0].attempt;
    expect(token).not.toBe(attempt);
    const human = await cli(['inspect', '--key', scope.key, ...withPrefix], onRedis);
    expect(human.stdout).toMatch(new RegExp(`^attempt {2}${token} \\(1 attempt so far\\)$`, 'm'));
    expect(human.stdout).toMatch(/^steps {4}create-charge, charge-card \(2\)$/m);
    expect(human.stdout).not.toContain('secret');
    expect((await json<Shown[]>(['stuck', ...withPrefix], onRedis)).value.map(({ key }) => key)).toEqual([scope.key]);

    const wrong = await json<{ outcome: string }>(['release', ...scopeArgs(scope), '--attempt', attempt], onRedis);
    expect(wrong).toMatchObject({ code: 1, value: { outcome: 'other-attempt' } });
    const released = await cli(['release', ...scopeArgs(scope), '--attempt', token], onRedis);
    expect(released).toMatchObject({ code: 0, stdout: 'Released: the next request with this key runs the handler.\n' });
    expect((await cli(['inspect', '--key', scope.key, ...withPrefix], onRedis)).code).toBe(1);
    // Steps and all: another request of the key is a new claim.
    const timing = { leaseSeconds: 60, ttlSeconds: 3600 };
    expect(await store.claim(scope, 'other-fp', randomUUID(), timing)).toEqual({ claimed: true, takeover: false });
  });

  it("refuses two stores at once and the other store's options (2), and says when Redis cannot be reached (3)", async () => {
    const both = await cli(['stuck'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none', ...onRedis });
    expect(both.code).toBe(2);
    expect(both.stderr).toContain('DATABASE_URL and REDIS_URL are set, each naming a store');
    // A flag names the store: the environment's other one is then not asked.
    expect(
      (
        await cli(['stuck', '--redis-url', REDIS_URL, ...withPrefix], {
          DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none',
        })
      ).code,
    ).toBe(0);
    const table = await cli(['stuck', '--table', 'idempotency_records'], onRedis);
    expect(table).toMatchObject({ code: 2 });
    expect(table.stderr).toContain('--table is for PostgreSQL; on Redis, --key-prefix');
    const nodes = await cli(['stuck'], { REDIS_CLUSTER_NODES: '127.0.0.1' });
    expect(nodes.stderr).toContain("the Redis Cluster's nodes are host:port,host:port,...: not '127.0.0.1'");
    const unreachable = await cli(['stuck', '--redis-url', 'redis://127.0.0.1:1'], {});
    expect(unreachable.code).toBe(3);
    expect(unreachable.stderr).toContain('Redis could not be reached');
  });
});

describeWith(redisCluster, 'the operator command-line tool on a Redis Cluster (REDIS_CLUSTER_NODES)', () => {
  const cluster = useRedisCluster({ masters: 3, replicasPerMaster: 0 });
  const keyPrefix = `test:${randomBytes(4).toString('hex')}:cli:`;

  it('lists the stuck records of every primary, and releases one wherever its slot is', async () => {
    const store = new RedisIdempotencyStore(cluster.newClient(), { keyPrefix });
    const scopes = Array.from({ length: 9 }, (_, index) => ({ account: '', endpoint: ENDPOINT, key: `k${index}` }));
    for (const scope of scopes) await claimOnRedis(store, scope, 'lease-lapsed');
    const onCluster = {
      REDIS_CLUSTER_NODES: cluster.startupNodes.map(({ host, port }) => `${host}:${port}`).join(','),
    };
    const stuck = (await json<Shown[]>(['stuck', '--key-prefix', keyPrefix], onCluster)).value;
    expect(stuck.map(({ key }) => key).sort()).toEqual(scopes.map(({ key }) => key));
    const { key, attempt } = stuck[4];
    const release = ['release', '--account', '', '--endpoint', ENDPOINT, '--key', key, '--attempt', attempt];
    expect((await cli([...release, '--key-prefix', keyPrefix], onCluster)).code).toBe(0);
    expect((await json<Shown[]>(['stuck', '--key-prefix', keyPrefix], onCluster)).value).toHaveLength(8);
  });
});
