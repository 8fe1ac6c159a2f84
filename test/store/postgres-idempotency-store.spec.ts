import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { DataSource } from 'typeorm';
import { type IdempotencyScope, type StoredResponse } from '../../src/index.js';
import {
  idempotencyMigrations,
  IdempotencyRecord,
  PostgresIdempotencyStore,
  type PostgresStoreTransaction,
} from '../../src/postgres/index.js';
import { waitingForLock } from '../support/hold-lock.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { waitFor } from '../support/wait-for.js';

const timing = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = {
  status: 201,
  headers: { 'content-type': 'application/json; charset=utf-8', location: '/v1/charges/ch_1' },
  body: Buffer.from([0x7b, 0x00, 0xff, 0x7d]),
};

let db: TestDatabase;
let dataSource: DataSource;
let store: PostgresIdempotencyStore;
let counter = 0;

function newScope(): IdempotencyScope {
  counter += 1;
  return { account: 'acct_1', endpoint: 'POST /v1/charges', key: `key-${counter}` };
}

async function recordOf(scope: IdempotencyScope) {
  const [row] = await db.query(
    'SELECT status, attempt, fingerprint, expires_at - completed_at AS ttl, locked_until > now() AS locked FROM idempotency_records WHERE account = $1 AND endpoint = $2 AND idempotency_key = $3',
    [scope.account, scope.endpoint, scope.key],
  );
  return row;
}

beforeAll(async () => {
  db = await createTestDatabase();
  dataSource = new DataSource({
    type: 'postgres',
    url: db.url,
    entities: [IdempotencyRecord],
    migrations: idempotencyMigrations(),
  });
  await dataSource.initialize();
  await dataSource.runMigrations();
  store = new PostgresIdempotencyStore(dataSource, 'idempotency_records');
});

afterAll(async () => {
  await store?.close();
  await dataSource?.destroy();
  await db?.drop();
});

describe('claim', () => {
  it('claims a new key and commits an in-progress record with a lease on the database clock', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await expect(store.claim(scope, 'fp', attempt, timing)).resolves.toEqual({ claimed: true, takeover: false });
    await expect(recordOf(scope)).resolves.toMatchObject({
      status: 'in_progress',
      attempt,
      fingerprint: 'fp',
      locked: true,
    });
  });

  it('lets exactly one of many concurrent claims win, and shows the others the in-progress record', async () => {
    const scope = newScope();
    const results = await Promise.all(Array.from({ length: 24 }, () => store.claim(scope, 'fp', randomUUID(), timing)));
    expect(results.filter((result) => result.claimed)).toHaveLength(1);
    for (const result of results.filter((r) => !r.claimed)) {
      expect(result).toEqual({ claimed: false, existing: { status: 'in_progress', fingerprint: 'fp' } });
    }
  });

  it('returns the completed record, byte for byte, with the time it has left on the database clock', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, timing);
    await expect(store.complete({ scope, attempt }, response, 3600)).resolves.toBe(true);
    await expect(store.claim(scope, 'fp', randomUUID(), timing)).resolves.toEqual({
      claimed: false,
      existing: { status: 'completed', fingerprint: 'fp', response, expiresInSeconds: expect.any(Number) },
    });
    await expect(recordOf(scope)).resolves.toMatchObject({ status: 'completed', ttl: { hours: 1 } });
    await db.query(
      `UPDATE idempotency_records SET expires_at = now() + interval '90 seconds' WHERE idempotency_key = $1`,
      [scope.key],
    );
    const again = await store.claim(scope, 'fp', randomUUID(), timing);
    expect(
      again.claimed === false && again.existing.status === 'completed' && again.existing.expiresInSeconds,
    ).toBeCloseTo(90, 0);
  });

  it('isolates accounts and endpoints: the same key in another scope is a new claim', async () => {
    const scope = newScope();
    await store.claim(scope, 'fp', randomUUID(), timing);
    await expect(store.claim({ ...scope, account: 'acct_2' }, 'fp', randomUUID(), timing)).resolves.toEqual({
      claimed: true,
      takeover: false,
    });
    await expect(store.claim({ ...scope, endpoint: 'POST /v1/refunds' }, 'fp', randomUUID(), timing)).resolves.toEqual({
      claimed: true,
      takeover: false,
    });
  });

  it('lets exactly one of several takers win a lapsed lease, and fences the attempt that lost it', async () => {
    const scope = newScope();
    const first = randomUUID();
    await store.claim(scope, 'fp', first, timing);
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 second' WHERE idempotency_key = $1`,
      [scope.key],
    );

    const takers = Array.from({ length: 8 }, () => randomUUID());
    const results = await Promise.all(takers.map((attempt) => store.claim(scope, 'fp', attempt, timing)));
    expect(results.filter((result) => result.claimed)).toEqual([{ claimed: true, takeover: true }]);
    const winner = takers[results.findIndex((result) => result.claimed)];

    await expect(store.complete({ scope, attempt: first }, response, 3600)).resolves.toBe(false);
    await expect(store.release({ scope, attempt: first })).resolves.toBe(false);
    await expect(recordOf(scope)).resolves.toMatchObject({ status: 'in_progress', attempt: winner });
    await expect(store.complete({ scope, attempt: winner }, response, 3600)).resolves.toBe(true);
  });

  it('does not let a different request take over a lapsed lease', async () => {
    const scope = newScope();
    await store.claim(scope, 'fp', randomUUID(), timing);
    await db.query(
      `UPDATE idempotency_records SET locked_until = now() - interval '1 second' WHERE idempotency_key = $1`,
      [scope.key],
    );
    await expect(store.claim(scope, 'other', randomUUID(), timing)).resolves.toEqual({
      claimed: false,
      existing: { status: 'in_progress', fingerprint: 'fp' },
    });
  });

  it('treats an expired record as absent: any request may claim it, and only one of several wins', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, timing);
    await store.complete({ scope, attempt }, response, 3600);
    await db.query(
      `UPDATE idempotency_records SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`,
      [scope.key],
    );

    const results = await Promise.all(
      Array.from({ length: 8 }, () => store.claim(scope, 'a new request', randomUUID(), timing)),
    );
    expect(results.filter((result) => result.claimed)).toEqual([{ claimed: true, takeover: false }]);
    await expect(recordOf(scope)).resolves.toMatchObject({ status: 'in_progress', fingerprint: 'a new request' });
  });
});

describe('complete and release', () => {
  it('only the holder of the claim may complete or release it', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, timing);
    await expect(store.complete({ scope, attempt: randomUUID() }, response, 3600)).resolves.toBe(false);
    await expect(store.release({ scope, attempt: randomUUID() })).resolves.toBe(false);
    await expect(store.release({ scope, attempt })).resolves.toBe(true);
    await expect(recordOf(scope)).resolves.toBeUndefined();
  });

  it('never releases a completed record', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, timing);
    await store.complete({ scope, attempt }, response, 3600);
    await expect(store.release({ scope, attempt })).resolves.toBe(false);
    await expect(recordOf(scope)).resolves.toMatchObject({ status: 'completed' });
  });
});

describe('purgeExpired', () => {
  it('deletes expired records in bounded batches and keeps live ones', async () => {
    await db.query('DELETE FROM idempotency_records');
    await db.query(`
      INSERT INTO idempotency_records (account, endpoint, idempotency_key, fingerprint, status, attempt, created_at, expires_at)
      SELECT 'acct', 'POST /purge', 'expired-' || i, 'fp', 'completed', gen_random_uuid(), now(), now() - interval '1 minute'
      FROM generate_series(1, 2500) AS i`);
    const live = newScope();
    await store.claim(live, 'fp', randomUUID(), timing);

    await expect(store.purgeExpired(1000)).resolves.toBe(1000);
    await expect(store.purgeExpired(1000)).resolves.toBe(1000);
    await expect(store.purgeExpired(1000)).resolves.toBe(500);
    await expect(store.purgeExpired(1000)).resolves.toBe(0);
    await expect(db.query('SELECT count(*)::int AS n FROM idempotency_records')).resolves.toEqual([{ n: 1 }]);
    await expect(recordOf(live)).resolves.toMatchObject({ status: 'in_progress' });
  });
});

describe('schema', () => {
  it('the migration creates exactly what the entity maps', async () => {
    const pending = await dataSource.driver.createSchemaBuilder().log();
    expect(pending.upQueries.map((query) => query.query)).toEqual([]);
  });

  it('works under a custom, schema-qualified table name, with a migration of its own', async () => {
    await db.query('CREATE SCHEMA billing');
    const withCustomTable = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: [...idempotencyMigrations(), ...idempotencyMigrations('billing.idem_keys')],
    });
    await withCustomTable.initialize();
    try {
      const applied = await withCustomTable.runMigrations();
      expect(applied.map((migration) => migration.name)).toEqual([
        'CreateIdempotencyRecordsBillingIdemKeys1764633600000',
        'IdempotencyRecordsV0_2_0BillingIdemKeys_1796256000000',
        'IdempotencyRecordsV0_2_0LockHeldBillingIdemKeys_1796342400000',
        'IdempotencyRecordsV0_4_0StepsBillingIdemKeys_1796774400000',
        'IdempotencyRecordsV0_4_0InProgressIndexBillingIdemKeys_1796860800000',
      ]);
      const custom = new PostgresIdempotencyStore(withCustomTable, 'billing.idem_keys');
      const scope = newScope();
      const attempt = randomUUID();
      await expect(custom.claim(scope, 'fp', attempt, timing)).resolves.toEqual({ claimed: true, takeover: false });
      await expect(custom.complete({ scope, attempt }, response, 60)).resolves.toBe(true);
      await expect(db.query('SELECT count(*)::int AS n FROM billing.idem_keys')).resolves.toEqual([{ n: 1 }]);
      await expect(recordOf(scope)).resolves.toBeUndefined();
    } finally {
      await withCustomTable.destroy();
    }
  });

  it('quotes every name it derives from the table name, so odd characters and double quotes work', async () => {
    await db.query('CREATE SCHEMA "odd ""schema"');
    const tableName = 'odd "schema.idem"keys';
    const withOddTable = new DataSource({
      type: 'postgres',
      url: db.url,
      migrations: idempotencyMigrations(tableName),
    });
    await withOddTable.initialize();
    const odd = new PostgresIdempotencyStore(withOddTable, tableName);
    try {
      await withOddTable.runMigrations();
      await expect(
        db.query(
          `SELECT indexname FROM pg_indexes WHERE schemaname = 'odd "schema' AND tablename = 'idem"keys' ORDER BY indexname`,
        ),
      ).resolves.toEqual([
        { indexname: 'idem"keys_expires_at_idx' },
        { indexname: 'idem"keys_in_progress_idx' },
        { indexname: 'idem"keys_pkey' },
      ]);
      const scope = newScope();
      const attempt = randomUUID();
      await expect(odd.claim(scope, 'fp', attempt, timing)).resolves.toEqual({ claimed: true, takeover: false });
      await expect(odd.complete({ scope, attempt }, response, 0.001)).resolves.toBe(true);
      await waitFor(
        async () => ((await odd.purgeExpired(10)) === 1 ? true : undefined),
        'the record to expire and be purged',
      );
      for (const _ of idempotencyMigrations(tableName)) await withOddTable.undoLastMigration();
      await expect(db.query(`SELECT to_regclass('"odd ""schema"."idem""keys"') AS table`)).resolves.toEqual([
        { table: null },
      ]);
    } finally {
      await odd.close();
      await withOddTable.destroy();
    }
  });
});

describe('claim racing a takeover', () => {
  it('never answers with the stale version of a record that another attempt took over meanwhile', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fpA', attempt, timing);
    await store.complete({ scope, attempt }, { ...response, body: Buffer.from('OLD RESPONSE') }, 3600);
    await db.query(
      `UPDATE idempotency_records SET expires_at = now() - interval '1 second' WHERE idempotency_key = $1`,
      [scope.key],
    );

    // Attempt X takes the expired record over for another request, and holds its transaction open.
    const x = new pg.Client({ connectionString: db.url });
    await x.connect();
    try {
      await x.query('BEGIN');
      await x.query(
        `UPDATE idempotency_records SET fingerprint = 'fpB', status = 'in_progress', attempt = gen_random_uuid(),
           locked_until = now() + interval '1 minute', expires_at = now() + interval '1 hour', completed_at = NULL,
           response_status = NULL, response_headers = NULL, response_body = NULL
         WHERE idempotency_key = $1`,
        [scope.key],
      );
      // A retry of the old request starts now (its snapshot still shows the old response) and waits for X.
      const retry = store.claim(scope, 'fpA', randomUUID(), timing);
      await waitFor(waitingForLock(db, '%'), 'the retry to wait for the takeover');
      await x.query('COMMIT');
      await expect(retry).resolves.toEqual({ claimed: false, existing: { status: 'in_progress', fingerprint: 'fpB' } });
    } finally {
      await x.end();
    }
  });
});

describe('renew', () => {
  it('extends the lease of a held claim only', async () => {
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, { leaseSeconds: 1, ttlSeconds: 60 });
    await expect(store.renew({ scope, attempt }, { leaseSeconds: 600, ttlSeconds: 60 })).resolves.toBe(true);
    const [{ lease }] = await db.query<{ lease: number }>(
      'SELECT extract(epoch FROM locked_until - now())::int AS lease FROM idempotency_records WHERE idempotency_key = $1',
      [scope.key],
    );
    expect(lease).toBeGreaterThan(500);
    await expect(store.renew({ scope, attempt: randomUUID() }, timing)).resolves.toBe(false);
  });
});

describe('transactions', () => {
  it('stores the outcome with the transaction: nothing before the commit, nothing after a rollback', async () => {
    await db.query('CREATE TABLE IF NOT EXISTS work_done (key text PRIMARY KEY)');
    for (const ending of ['commit', 'rollback'] as const) {
      const scope = newScope();
      const attempt = randomUUID();
      await store.claim(scope, 'fp', attempt, timing);
      const transaction = await store.beginTransaction();
      await transaction.manager.query('INSERT INTO work_done (key) VALUES ($1)', [scope.key]);
      await expect(store.complete({ scope, attempt }, response, 3600, transaction)).resolves.toBe(true);
      await expect(recordOf(scope)).resolves.toMatchObject({ status: 'in_progress' });
      await transaction[ending]();
      const work = await db.query('SELECT 1 FROM work_done WHERE key = $1', [scope.key]);
      if (ending === 'commit') {
        await expect(recordOf(scope)).resolves.toMatchObject({ status: 'completed' });
        expect(work).toHaveLength(1);
      } else {
        await expect(recordOf(scope)).resolves.toMatchObject({ status: 'in_progress' });
        expect(work).toHaveLength(0);
      }
    }
  });
});

describe('abandon', () => {
  it("cuts the transaction's connection: its session ends and what it wrote is rolled back", async () => {
    await db.query('CREATE TABLE IF NOT EXISTS abandoned_work (key text PRIMARY KEY)');
    const transaction = await store.beginTransaction();
    const [{ pid }] = await transaction.manager.query('SELECT pg_backend_pid() AS pid');
    await transaction.manager.query(`INSERT INTO abandoned_work (key) VALUES ('lost')`);
    transaction.abandon();
    await waitFor(
      async () =>
        (await db.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [pid])).length === 0 ? true : undefined,
      'the session to end',
    );
    await expect(transaction.rollback()).rejects.toThrow();
    await expect(db.query('SELECT * FROM abandoned_work')).resolves.toEqual([]);
  });

  it('gives the transaction slot back, so that later transactions still begin', async () => {
    // A pool of three leaves one transaction slot.
    const small = new DataSource({ type: 'postgres', url: db.url, extra: { max: 3 } });
    await small.initialize();
    const oneSlot = new PostgresIdempotencyStore(small, 'idempotency_records');
    try {
      for (let i = 0; i < 3; i += 1) {
        const transaction = await Promise.race([
          oneSlot.beginTransaction(),
          new Promise<never>((_, reject) =>
            setTimeout(() => reject(new Error('no transaction slot is free')), 5_000).unref(),
          ),
        ]);
        transaction.abandon();
        await transaction.rollback().catch(() => undefined);
      }
    } finally {
      await oneSlot.close();
      await small.destroy();
    }
  });
});

describe('holder transactions', () => {
  async function lockHeldOf(scope: IdempotencyScope): Promise<boolean | undefined> {
    const [row] = await db.query<{ lock_held: boolean }>(
      'SELECT lock_held FROM idempotency_records WHERE account = $1 AND endpoint = $2 AND idempotency_key = $3',
      [scope.account, scope.endpoint, scope.key],
    );
    return row?.lock_held;
  }

  /** Advisory locks held in the test's database, by any session. */
  async function advisoryLocks(): Promise<number> {
    const [{ n }] = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
       WHERE l.locktype = 'advisory' AND d.datname = current_database()`,
    );
    return n;
  }

  it('marks lock_held only on a claim whose transaction took the lock, and a probe holds it for its statement only', async () => {
    const scope = newScope();
    const holder = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    expect(holder.heldLock?.key).toMatch(/^-?\d+$/);
    await expect(store.claim(scope, 'fp', randomUUID(), timing, holder)).resolves.toEqual({
      claimed: true,
      takeover: false,
    });
    await expect(lockHeldOf(scope)).resolves.toBe(true);
    await expect(advisoryLocks()).resolves.toBe(1);
    // The holder is alive: the probe fails, and neither a claim nor a second transaction takes the scope.
    await expect(store.claim(scope, 'fp', randomUUID(), timing)).resolves.toEqual(inProgress('fp'));
    const second = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    expect(second.heldLock).toBeUndefined();
    await second.rollback();
    await holder.rollback();
    await expect(advisoryLocks()).resolves.toBe(0);
    // Taken over by a claim without a transaction: its probe took the lock, and let it go with its statement.
    await expect(store.claim(scope, 'fp', randomUUID(), timing)).resolves.toEqual({ claimed: true, takeover: true });
    await expect(lockHeldOf(scope)).resolves.toBe(false);
    await expect(advisoryLocks()).resolves.toBe(0);
  });

  it('takes over at once the claim of a holder whose session ended (its process killed), before the lease', async () => {
    const scope = newScope();
    const holder = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    await store.claim(scope, 'fp', randomUUID(), timing, holder);
    const [{ pid }] = await holder.manager.query<{ pid: number }[]>('SELECT pg_backend_pid() AS pid');
    await db.query('SELECT pg_terminate_backend($1)', [pid]);
    const started = Date.now();
    const taken = await waitFor(async () => {
      const result = await store.claim(scope, 'fp', randomUUID(), timing);
      return result.claimed ? result : undefined;
    }, 'the takeover');
    expect(taken).toEqual({ claimed: true, takeover: true });
    expect(Date.now() - started).toBeLessThan(5_000); // the lease is 60 s
    await holder.rollback().catch(() => undefined);
  });

  // A claim can reach the server late (it waited for a connection, or behind a batch in flight) after its request was
  // refused and its holder rolled back, which freed the lock for the retry's holder. Its holder's lock is checked by
  // that transaction's identity when the statement runs, in a batch as alone.
  it.each([
    ['in a batch', () => store],
    [
      'alone (batching: false)',
      () => new PostgresIdempotencyStore(dataSource, 'idempotency_records', { batching: false }),
    ],
  ])(
    "never lets a claim that reaches the server after its holder ended take over the retry's live claim, %s",
    async (_, storeFor) => {
      const claiming = storeFor();
      const scope = newScope();
      const late = (await claiming.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
      expect(late.heldLock).toBeDefined();
      await late.rollback();
      const retry = (await claiming.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
      try {
        expect(retry.heldLock).toBeDefined();
        const retryAttempt = randomUUID();
        await expect(claiming.claim(scope, 'fp', retryAttempt, timing, retry)).resolves.toEqual({
          claimed: true,
          takeover: false,
        });
        await expect(claiming.claim(scope, 'fp', randomUUID(), timing, late)).resolves.toEqual(inProgress('fp'));
        await expect(recordOf(scope)).resolves.toMatchObject({ attempt: retryAttempt });
        await expect(claiming.complete({ scope, attempt: retryAttempt }, response, 3600, retry)).resolves.toBe(true);
        await retry.commit();
      } finally {
        await retry.rollback();
        if (claiming !== store) await claiming.close();
      }
      await expect(lockHeldOf(scope)).resolves.toBe(false); // completed: nobody's lock
    },
  );

  it("checks a claim's holder by its transaction's id and its backend: the same id on another backend does not pass", async () => {
    // Virtual transaction ids are a backend's slot and a counter, both restarted with the server: after a restart, a
    // retry's holder can hold the scope's lock under the id a holder lost in the restart had. Its backend's pid differs.
    const scope = newScope();
    const retry = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    try {
      const { key, lockedBy } = retry.heldLock as NonNullable<PostgresStoreTransaction['heldLock']>;
      const [{ pid }] = await retry.manager.query<{ pid: number }[]>('SELECT pg_backend_pid() AS pid');
      const [id] = lockedBy.split('@');
      expect(lockedBy).toBe(`${id}@${pid}`);
      const lost = Object.assign(
        Object.create(Object.getPrototypeOf(retry) as object) as PostgresStoreTransaction,
        retry,
        { heldLock: { key, lockedBy: `${id}@${pid + 1}` } }, // the same id, another backend
      );
      await expect(store.claim(scope, 'fp', randomUUID(), timing, lost)).resolves.toEqual({
        claimed: true,
        takeover: false,
      });
      await expect(lockHeldOf(scope)).resolves.toBe(false); // its lease frees it, not the lock of another's transaction
    } finally {
      await retry.rollback();
    }
  });

  it("locks one table alike under every spelling of its name: a holder never takes over the other spelling's", async () => {
    const scope = newScope();
    const qualified = new PostgresIdempotencyStore(dataSource, 'public.idempotency_records');
    const holder = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    try {
      await store.claim(scope, 'fp', randomUUID(), timing, holder);
      const other = (await qualified.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
      try {
        expect(other.heldLock).toBeUndefined();
        await expect(qualified.claim(scope, 'fp', randomUUID(), timing, other)).resolves.toEqual(inProgress('fp'));
        await expect(qualified.claim(scope, 'fp', randomUUID(), timing)).resolves.toEqual(inProgress('fp'));
      } finally {
        await other.rollback();
      }
    } finally {
      await holder.rollback();
      await qualified.close();
    }
  });

  it('never probes a claim made without the lock: standard-mode claims wait out their lease', async () => {
    const scope = newScope();
    await store.claim(scope, 'fp', randomUUID(), timing);
    await expect(lockHeldOf(scope)).resolves.toBe(false);
    const taker = (await store.beginHoldingTransaction(scope)) as PostgresStoreTransaction;
    try {
      expect(taker.heldLock).toBeDefined(); // nobody holds the lock, yet the claim is live
      await expect(store.claim(scope, 'fp', randomUUID(), timing, taker)).resolves.toEqual(inProgress('fp'));
      await expect(store.claim(scope, 'fp', randomUUID(), timing)).resolves.toEqual(inProgress('fp'));
    } finally {
      await taker.rollback();
    }
  });
});

function inProgress(fingerprint: string) {
  return { claimed: false, existing: { status: 'in_progress', fingerprint } };
}

describe('waitForChange and markAwaited', () => {
  /** Records which scopes were notified on the store's channel, as a second listener sees them. */
  async function listenToNotifications(): Promise<{
    notified(scope: IdempotencyScope): boolean;
    close(): Promise<void>;
  }> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const [{ channel }] = (
      await client.query(`SELECT 'idempotency_' || left(md5('idempotency_records'), 20) AS channel`)
    ).rows;
    const payloads: string[] = [];
    client.on('notification', (message) => payloads.push(message.payload ?? ''));
    await client.query(`LISTEN ${channel}`);
    const digest = (scope: IdempotencyScope) =>
      createHash('md5').update(`${scope.account}\n${scope.endpoint}\n${scope.key}`).digest('hex');
    return { notified: (scope) => payloads.includes(digest(scope)), close: () => client.end() };
  }

  it('wakes the waiters of an awaited scope when its outcome is stored or its claim released, not others', async () => {
    for (const end of ['complete', 'release'] as const) {
      const scope = newScope();
      const other = newScope();
      const attempt = randomUUID();
      await store.claim(scope, 'fp', attempt, timing);
      const waiting = store.waitForChange(scope, 30_000);
      const otherWaiting = store.waitForChange(other, 30_000);
      let otherWoken = false;
      void otherWaiting.changed.then(() => (otherWoken = true));
      await waiting.listening;
      await expect(store.markAwaited(scope)).resolves.toBe(true);
      if (end === 'complete') await store.complete({ scope, attempt }, response, 60);
      else await store.release({ scope, attempt });
      await waiting.changed;
      expect(otherWoken).toBe(false);
      otherWaiting.cancel();
    }
  });

  it('sends no notification for an outcome nobody awaits', async () => {
    const notifications = await listenToNotifications();
    try {
      const [quiet, awaited] = [newScope(), newScope()];
      const [quietAttempt, awaitedAttempt] = [randomUUID(), randomUUID()];
      await store.claim(quiet, 'fp', quietAttempt, timing);
      await store.claim(awaited, 'fp', awaitedAttempt, timing);
      await store.markAwaited(awaited);
      await store.complete({ scope: quiet, attempt: quietAttempt }, response, 60);
      await store.complete({ scope: awaited, attempt: awaitedAttempt }, response, 60);
      // Notifications arrive in commit order: once the awaited one is in, the quiet one would have been too.
      await waitFor(
        async () => (notifications.notified(awaited) ? true : undefined),
        'the notification of the awaited outcome',
      );
      expect(notifications.notified(quiet)).toBe(false);
    } finally {
      await notifications.close();
    }
  });

  it('refuses to await a scope that is not in progress under a live lease, so that the waiter claims again', async () => {
    const completed = newScope();
    const attempt = randomUUID();
    await store.claim(completed, 'fp', attempt, timing);
    await store.complete({ scope: completed, attempt }, response, 60);
    await expect(store.markAwaited(completed)).resolves.toBe(false);
    await expect(store.markAwaited(newScope())).resolves.toBe(false);

    const lapsed = newScope();
    await store.claim(lapsed, 'fp', randomUUID(), { ...timing, leaseSeconds: 0.001 });
    await waitFor(
      async () =>
        (
          await db.query(`SELECT 1 FROM idempotency_records WHERE idempotency_key = $1 AND locked_until <= now()`, [
            lapsed.key,
          ])
        )[0],
      'the lease to lapse',
    );
    await expect(store.markAwaited(lapsed)).resolves.toBe(false);
  });

  it('marks a record awaited once: a second waiter reads the mark and writes no new version of the row', async () => {
    const scope = newScope();
    await store.claim(scope, 'fp', randomUUID(), timing);
    const version = async () =>
      (
        await db.query<{ xmin: string }>('SELECT xmin FROM idempotency_records WHERE idempotency_key = $1', [scope.key])
      )[0].xmin;
    await expect(store.markAwaited(scope)).resolves.toBe(true);
    const marked = await version();
    await expect(store.markAwaited(scope)).resolves.toBe(true);
    expect(await version()).toBe(marked);
  });

  it('keeps a takeover awaited: the outcome of the attempt that took the key over wakes the waiters', async () => {
    const notifications = await listenToNotifications();
    try {
      const scope = newScope();
      await store.claim(scope, 'fp', randomUUID(), timing);
      await store.markAwaited(scope);
      await db.query(`UPDATE idempotency_records SET locked_until = now() WHERE idempotency_key = $1`, [scope.key]);
      const taker = randomUUID();
      await expect(store.claim(scope, 'fp', taker, timing)).resolves.toEqual({ claimed: true, takeover: true });
      await store.complete({ scope, attempt: taker }, response, 60);
      await waitFor(async () => (notifications.notified(scope) ? true : undefined), 'the notification');
    } finally {
      await notifications.close();
    }
  });

  it('ends at its timeout when nothing changes', async () => {
    await expect(store.waitForChange(newScope(), 50).changed).resolves.toBeUndefined();
  });
});
