import { randomUUID } from 'node:crypto';
import { Controller, Get, Injectable, Post, Req } from '@nestjs/common';
import { InjectDataSource, InjectRepository } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, Repository } from 'typeorm';
import { Idempotent } from '../../src/index.js';
import { type IdempotencyPostgresOptions, PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { type Gate, GateQueue } from '../support/gate.js';
import { LedgerEntry } from '../support/ledger-entry.entity.js';
import { headerOf, type Platform, PLATFORMS, type PlatformRequest as Request } from '../support/platforms.js';
import { RecordingLogger } from '../support/recording-logger.js';
import { spawnTypeScriptServer } from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestApp, type TestApp } from '../support/test-app.js';

/**
 * Transactional runs with the services apps already have: repositories injected with `@InjectRepository()`,
 * `PostgresIdempotencyContext.getRepository()`, `dataSource.transaction()`, `@nestjs-cls/transactional`, and writes
 * that go outside the run's transaction.
 */

/** An entity no repository is made for before a run asks for one. */
@Entity({ name: 'audit_entries' })
class AuditEntry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  key!: string;
}

/** The gate the next request to a gated route waits at (each gate holds one request). */
const gates = new GateQueue();

/** A service as apps write them, on the repository Nest injects. */
@Injectable()
class LedgerService {
  constructor(@InjectRepository(LedgerEntry) private readonly entries: Repository<LedgerEntry>) {}

  record(key: string): Promise<LedgerEntry> {
    return this.entries.save(this.entries.create({ key }));
  }

  async keys(): Promise<string[]> {
    return (await this.entries.find({ order: { id: 'ASC' } })).map((entry) => entry.key);
  }
}

@Controller('ledger')
class LedgerController {
  constructor(
    private readonly ledger: LedgerService,
    private readonly context: PostgresIdempotencyContext,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  /** Writes through the injected repository. */
  @Post('injected')
  @Idempotent({ transactional: true })
  async injected(@Req() req: Request) {
    await this.ledger.record(this.key());
    return this.afterWriting(req);
  }

  /** Writes through `PostgresIdempotencyContext.getRepository()`. */
  @Post('context-repository')
  @Idempotent({ transactional: true })
  async contextRepository(@Req() req: Request) {
    const entries = this.context.getRepository(LedgerEntry);
    await entries.save(entries.create({ key: this.key() }));
    return this.afterWriting(req);
  }

  /** Writes in a transaction of its own making, as `@Transactional()` of `@nestjs-cls/transactional` does. */
  @Post('nested')
  @Idempotent({ transactional: true })
  async nested(@Req() req: Request) {
    await this.dataSource.transaction((manager) => manager.save(manager.create(LedgerEntry, { key: this.key() })));
    return this.afterWriting(req);
  }

  /** Writes through a query builder of a repository the data source makes (and keeps) the first time it is asked. */
  @Post('repository-made-in-run')
  @Idempotent({ transactional: true })
  async repositoryMadeInRun(@Req() req: Request) {
    await this.dataSource.getRepository(AuditEntry).createQueryBuilder().insert().values({ key: this.key() }).execute();
    return this.afterWriting(req);
  }

  /** Writes through an entity manager of its own, which no run's transaction can be joined by. */
  @Post('escaping')
  @Idempotent({ transactional: true })
  async escaping(@Req() req: Request) {
    const manager = this.dataSource.createEntityManager();
    await manager.save(manager.create(LedgerEntry, { key: this.key() }));
    return this.afterWriting(req);
  }

  /** Standard mode: writes through the injected repository, which commits it at once. */
  @Post('standard')
  @Idempotent()
  async standard(@Req() req: Request) {
    await this.ledger.record(this.key());
    await gates.pass(req);
    return { ownManager: this.context.getRepository(LedgerEntry).manager === this.dataSource.manager };
  }

  /** Not idempotent: what the injected repository sees outside any run. */
  @Get()
  async list() {
    return this.ledger.keys();
  }

  private key(): string {
    return this.context.run!.key;
  }

  /**
   * Waits at its gate, then throws when the request says `X-Fail: true` (a header, which the fingerprint leaves
   * out, so that the retry is the same request), else answers with the keys its run sees.
   */
  private async afterWriting(req: Request) {
    await gates.pass(req);
    if (headerOf(req, 'x-fail') === 'true') throw new Error('the handler failed after writing');
    return { sees: await this.ledger.keys() };
  }
}

const logger = new RecordingLogger();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  await db.query('CREATE TABLE ledger_entries (id serial PRIMARY KEY, key text NOT NULL)');
  await db.query('CREATE TABLE audit_entries (id serial PRIMARY KEY, key text NOT NULL)');
});

afterAll(async () => {
  gates.releaseAll();
  await db?.drop();
});

/**
 * An app on `platform` with these module options for the tests of the enclosing block, closed after them: one at a
 * time, as Nest's TypeORM module takes two default data sources in one process for a mistake.
 */
function appWith(platform: Platform, options: IdempotencyPostgresOptions): { url: string } {
  const started = { url: '' };
  let app: TestApp | undefined;
  beforeAll(async () => {
    app = await startTestApp({
      platform,
      database: db,
      entities: [LedgerEntry, AuditEntry],
      features: [LedgerEntry],
      postgres: options,
      idempotency: { singleTenant: true },
      controllers: [LedgerController],
      providers: [LedgerService],
      logger,
    });
    started.url = app.url;
  });
  afterAll(async () => {
    gates.releaseAll();
    await app?.close();
  });
  return started;
}

/** Errors logged by a test must be the ones it expects: it takes them, and none may be left over. */
function takeErrors(): string[] {
  return logger.errors.splice(0);
}
afterEach(() => {
  expect(takeErrors()).toEqual([]);
  expect(logger.warnings.splice(0)).toEqual([]);
});

/**
 * What this issue is about: an attempt that writes, then fails, and its retry. The write must commit once, with
 * the retry's outcome, and not with the failed attempt.
 */
async function expectWrittenOnceByTheRetry(url: string, path: string): Promise<void> {
  const key = randomUUID();
  expect((await post(url, path, key).set('X-Fail', 'true')).status).toBe(500);
  expect(await entriesOf(key)).toBe(0);
  expect(await recordOf(key)).toBeUndefined();

  expect((await post(url, path, key)).status).toBe(201);
  expect(await entriesOf(key)).toBe(1);
}

/** Nest's log line of a handler's failure (`X-Fail: true`). */
const handlerFailure = expect.stringContaining('the handler failed after writing');

/** Sends the request and waits until its handler is held at its gate; one answered before that fails the test at once. */
async function heldAtGate(test: request.Test): Promise<{ gate: Gate; answer: Promise<request.Response> }> {
  const gate = gates.holdNext();
  const answer = test.then((response) => response); // sent once, here; the test awaits the answer again
  const early = await Promise.race([gate.reached.then(() => undefined), answer]);
  if (early) throw new Error(`answered ${early.status} ${JSON.stringify(early.body)} before reaching its gate`);
  return { gate, answer };
}

const post = (url: string, path: string, key: string) => request(url).post(path).set('Idempotency-Key', key).send({});
/** The rows written under `key`, in the ledger and among the audit entries. */
const entriesOf = async (key: string) =>
  (
    await db.query(
      'SELECT id FROM ledger_entries WHERE key = $1 UNION ALL SELECT id FROM audit_entries WHERE key = $1',
      [key],
    )
  ).length;
const recordOf = async (key: string) =>
  (await db.query<{ status: string }>('SELECT status FROM idempotency_records WHERE idempotency_key = $1', [key]))[0];

describe.each(PLATFORMS)('on %s', (platform) => {
  describe('with enlistDataSource: true', () => {
    const enlisted = appWith(platform, { enlistDataSource: true, onTransactionEscape: 'throw' });

    it.each([
      ['an injected repository', '/ledger/injected'],
      ["dataSource.transaction() (a savepoint of the run's transaction)", '/ledger/nested'],
      ['a repository the data source made inside a run, and keeps', '/ledger/repository-made-in-run'],
    ])(
      'rolls back a write through %s with the handler that throws after it: the retry writes it once',
      async (_through, path) => {
        await expectWrittenOnceByTheRetry(enlisted.url, path);
        expect(takeErrors()).toEqual([handlerFailure]);
      },
    );

    it("commits an injected repository's write with the stored outcome, and not before", async () => {
      const key = randomUUID();
      const { gate, answer } = await heldAtGate(post(enlisted.url, '/ledger/injected', key));
      // Written, but in the run's open transaction: neither another connection nor the app outside the run sees it.
      expect(await entriesOf(key)).toBe(0);
      expect((await request(enlisted.url).get('/ledger')).body).not.toContain(key);

      gate.release();
      const first = await answer;
      expect(first.status).toBe(201);
      expect(first.body.sees).toContain(key); // the run read its own write through the injected repository
      expect(await entriesOf(key)).toBe(1);
      expect(await recordOf(key)).toEqual({ status: 'completed' });

      const replay = await post(enlisted.url, '/ledger/injected', key);
      expect(replay.headers['idempotent-replay']).toBe('true');
      expect(replay.body).toEqual(first.body);
      expect(await entriesOf(key)).toBe(1);
    });

    it("keeps concurrent runs apart: each injected repository call joins its own run's transaction", async () => {
      const [first, second] = [randomUUID(), randomUUID()];
      const failing = await heldAtGate(post(enlisted.url, '/ledger/injected', first).set('X-Fail', 'true'));
      const succeeding = await heldAtGate(post(enlisted.url, '/ledger/injected', second));
      // Both written, neither committed: a request outside any run sees neither.
      const outside = (await request(enlisted.url).get('/ledger')).body;
      expect(outside).not.toContain(first);
      expect(outside).not.toContain(second);

      succeeding.gate.release();
      const secondResponse = await succeeding.answer;
      expect(secondResponse.status).toBe(201);
      expect(secondResponse.body.sees).toContain(second);
      expect(secondResponse.body.sees).not.toContain(first);

      failing.gate.release();
      expect((await failing.answer).status).toBe(500);
      expect(takeErrors()).toEqual([handlerFailure]);
      expect(await entriesOf(first)).toBe(0);
      expect(await entriesOf(second)).toBe(1);
    });

    it("refuses a write through an entity manager of its own with onTransactionEscape: 'throw': nothing is written, the key is released", async () => {
      const key = randomUUID();
      expect((await post(enlisted.url, '/ledger/escaping', key)).status).toBe(500);
      expect(takeErrors()).toEqual([
        expect.stringMatching(
          /TransactionEscapeError: An insert of LedgerEntry during the transactional run of key "[^"]+" of POST \/ledger\/escaping went outside its transaction/,
        ),
      ]);
      expect(await entriesOf(key)).toBe(0);
      expect(await recordOf(key)).toBeUndefined();
    });

    it("leaves a standard (non-transactional) route on the data source's own connections: its write commits at once", async () => {
      const key = randomUUID();
      const { gate, answer } = await heldAtGate(post(enlisted.url, '/ledger/standard', key));
      expect(await entriesOf(key)).toBe(1);
      gate.release();
      const response = await answer;
      expect(response.status).toBe(201);
      expect(response.body).toEqual({ ownManager: true });
    });
  });

  describe('by default (enlistDataSource: false)', () => {
    const byDefault = appWith(platform, {});

    it("runs PostgresIdempotencyContext.getRepository() in the run's transaction: rolled back with the handler, written once by the retry", async () => {
      await expectWrittenOnceByTheRetry(byDefault.url, '/ledger/context-repository');
      expect(takeErrors()).toEqual([handlerFailure]);
    });

    it("logs an injected repository's write as escaping the run's transaction, naming the entity and the route", async () => {
      const key = randomUUID();
      expect((await post(byDefault.url, '/ledger/injected', key).set('X-Fail', 'true')).status).toBe(500);
      expect(takeErrors()).toEqual([
        expect.stringMatching(
          /^ERROR \[Idempotency\] An insert of LedgerEntry during the transactional run of key "[^"]+" of POST \/ledger\/injected went outside its transaction: it commits on its own/,
        ),
        handlerFailure,
      ]);
      // What the log warns of: the write committed on its own, so the retry writes it a second time.
      expect(await entriesOf(key)).toBe(1);
      expect((await post(byDefault.url, '/ledger/injected', key)).status).toBe(201);
      expect(takeErrors()).toEqual([expect.stringContaining('An insert of LedgerEntry during the transactional run')]);
      expect(await entriesOf(key)).toBe(2);
    });
  });
});

describe('with enlistDataSource: true and @nestjs-cls/transactional (test/support/cls-ledger-server.ts)', () => {
  let server: Awaited<ReturnType<typeof spawnTypeScriptServer>> | undefined;
  beforeAll(async () => {
    server = await spawnTypeScriptServer('test/support/cls-ledger-server.ts', { DATABASE_URL: db.url });
  });
  afterAll(async () => {
    await server?.close();
  });

  it.each(['tx', 'transactional'])(
    "runs writes through txHost.tx (/cls-ledger/%s) in the run's transaction: rolled back with the handler, written once by the retry",
    (route) => expectWrittenOnceByTheRetry(server!.url, `/cls-ledger/${route}`),
  );
});
