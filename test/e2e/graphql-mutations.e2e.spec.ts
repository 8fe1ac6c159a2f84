import { NotFoundException, Optional } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Int, Mutation, ObjectType, Query, ResolveField, Resolver } from '@nestjs/graphql';
import { GraphQLClient, type Variables } from 'graphql-request';
import { DataSource } from 'typeorm';
import {
  Idempotent,
  IdempotencyContext,
  IdempotencySetupError,
  type IdempotencyModuleOptions,
} from '../../src/index.js';
import { IdempotencyGraphQLModule, type IdempotencyGraphQLOptions } from '../../src/graphql/index.js';
import { PostgresIdempotencyContext } from '../../src/postgres/index.js';
import { Gate } from '../support/gate.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { describeOnStores } from '../support/on-each-store.js';
import {
  modesOn,
  recordsOf,
  recordsOn,
  type StandardStore,
  startTestApp,
  type TestApp,
  useTestApp,
} from '../support/test-app.js';
import { type TestDatabase, useTestDatabase } from '../support/test-database.js';
import { statusOf, WORK_LOG, workRowsOf } from '../support/work-log.js';
import { waitFor } from '../support/wait-for.js';

const gates = new Map<string, Gate>();

@ObjectType()
class Charge {
  @Field(() => Int)
  amount!: number;

  /** The work_log row its run wrote: the same on every replay. */
  @Field(() => Int)
  run!: number;

  @Field(() => String)
  currency!: string;
}

// Marked as a whole: its mutation is claimed, its query passes (a query is read-only).
@Idempotent()
@Resolver()
class ChargesResolver {
  constructor(
    private readonly dataSource: DataSource,
    private readonly idempotency: IdempotencyContext,
    // None on Redis: the records are not on PostgreSQL there.
    @Optional() private readonly postgres?: PostgresIdempotencyContext,
  ) {}

  @Query(() => String)
  health(): string {
    return 'ok';
  }

  @Mutation(() => Charge)
  async createCharge(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('idempotencyKey', { type: () => String, nullable: true }) _key?: string,
    @Args('mode', { type: () => String, nullable: true }) mode?: string,
  ): Promise<Charge> {
    const key = this.idempotency.run?.scope.key ?? 'unguarded';
    if (mode === 'gated') await gates.get(key)?.pass();
    if (mode === 'missing') throw new NotFoundException('no such customer');
    const manager = this.postgres?.manager ?? this.dataSource.manager;
    const [{ id }] = await manager.query<Array<{ id: number }>>('INSERT INTO work_log (key) VALUES ($1) RETURNING id', [
      key,
    ]);
    return { amount, run: id, currency: 'eur' };
  }
}

const CREATE = /* GraphQL */ `
  mutation Create($amount: Int!, $key: String, $mode: String) {
    createCharge(amount: $amount, idempotencyKey: $key, mode: $mode) {
      amount
      run
    }
  }
`;

interface GraphqlAnswer {
  status: number;
  data?: Record<string, { amount: number; run: number; currency?: string } | null> | null;
  errors?: Array<{ message: string; extensions?: Record<string, unknown> }>;
}

const ANSWERED_OK = { status: 200, data: { health: 'ok' } };

/** Sends `document` with graphql-request, returning the HTTP status, data and errors whatever they are. */
async function send(app: TestApp, document: string, variables: Variables, headers: Record<string, string> = {}) {
  const client = new GraphQLClient(`${app.url}/graphql`, { headers, errorPolicy: 'all' });
  const { status, data, errors } = await client.rawRequest<GraphqlAnswer['data']>(document, variables);
  return { status, data, errors: errors as GraphqlAnswer['errors'] } satisfies GraphqlAnswer;
}

function graphqlApp(
  store: StandardStore,
  db: TestDatabase | { url: string },
  transactional: boolean,
  options: IdempotencyGraphQLOptions,
  moduleOptions: Partial<IdempotencyModuleOptions> = {},
) {
  return {
    ...recordsOn(store),
    database: db,
    pool: { max: 4 },
    idempotency: { singleTenant: true, transactional, retryAfterSeconds: 1, storeTimeoutSeconds: 1, ...moduleOptions },
    providers: [ChargesResolver],
    imports: [
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
      IdempotencyGraphQLModule.forRoot(options),
    ],
  };
}

describe('GraphQL mutations', () => {
  describeOnStores('records on %s', (store) => {
    // Of its own: the blocks of each store use the same keys.
    const db = useTestDatabase(WORK_LOG);

    describe.each(modesOn(store))('%s mode, the key in an argument', (mode) => {
      const app = useTestApp(() => graphqlApp(store, db, mode === 'transactional', { keyArgument: 'idempotencyKey' }));
      const records = recordsOf(app, db);
      const key = (name: string) => `${name}-${mode}`;

      it('runs a mutation once and replays its stored result, through a selection of its own', async () => {
        const first = await send(app, CREATE, { amount: 100, key: key('once') });
        expect(first).toEqual({ status: 200, data: { createCharge: { amount: 100, run: expect.any(Number) } } });
        const replay = await send(
          app,
          'mutation($key: String) { createCharge(amount: 100, idempotencyKey: $key) { run currency } }',
          { key: key('once') },
        );
        expect(replay.data).toEqual({ createCharge: { run: first.data?.createCharge?.run, currency: 'eur' } });
        expect(await workRowsOf(db, key('once'))).toHaveLength(1);
      });

      it('refuses the key with other arguments: IDEMPOTENCY_KEY_REUSE, status 200', async () => {
        await send(app, CREATE, { amount: 100, key: key('reused') });
        const reused = await send(app, CREATE, { amount: 200, key: key('reused') });
        expect(reused.status).toBe(200);
        expect(reused.data).toBeNull();
        expect(reused.errors?.[0]).toMatchObject({
          message: expect.stringContaining('already used with a different set of arguments'),
          extensions: { code: 'IDEMPOTENCY_KEY_REUSE' },
        });
        expect(await workRowsOf(db, key('reused'))).toHaveLength(1);
        // A client's mistake, not the server's: Nest's exception handler does not log it as an error.
        expect(app.logger.errors.filter((line) => line.includes('IdempotencyKeyReuseError'))).toEqual([]);
      });

      it('answers a duplicate while the first runs REQUEST_IN_PROGRESS with a retry hint', async () => {
        const gate = new Gate();
        gates.set(key('in-flight'), gate);
        const first = send(app, CREATE, { amount: 5, key: key('in-flight'), mode: 'gated' });
        await gate.reached;
        const duplicate = await send(app, CREATE, { amount: 5, key: key('in-flight'), mode: 'gated' });
        expect(duplicate.errors?.[0].extensions).toEqual({ code: 'REQUEST_IN_PROGRESS', retryAfterSeconds: 1 });
        gate.release();
        expect((await first).data?.createCharge).toEqual({ amount: 5, run: expect.any(Number) });
        expect(await workRowsOf(db, key('in-flight'))).toHaveLength(1);
      });

      it('stores an HttpException of a final status, and replays it without running the resolver again', async () => {
        const first = await send(app, CREATE, { amount: 1, key: key('missing'), mode: 'missing' });
        const replay = await send(app, CREATE, { amount: 1, key: key('missing'), mode: 'missing' });
        expect(first.errors?.[0].message).toBe('no such customer');
        expect(replay.errors).toEqual(first.errors);
        expect(await statusOf(records, key('missing'))).toBe('completed');
      });

      it("replays the argument's key under another alias: the key is the field's, whatever its alias", async () => {
        const under = (alias: string) =>
          `mutation($key: String) { ${alias}: createCharge(amount: 7, idempotencyKey: $key) { run } }`;
        const first = await send(app, under('first'), { key: key('aliased-argument') });
        const second = await send(app, under('second'), { key: key('aliased-argument') });
        expect(second.data).toEqual({ second: { run: first.data?.first?.run } });
        expect(await workRowsOf(db, key('aliased-argument'))).toHaveLength(1);
      });

      it('takes the header key for an explicit null argument, as for an absent one', async () => {
        const headers = { 'Idempotency-Key': key('null-argument') };
        const first = await send(app, CREATE, { amount: 6, key: null }, headers);
        expect(first.data?.createCharge?.amount).toBe(6);
        const replay = await send(app, CREATE, { amount: 6, key: null }, headers);
        expect(replay.data).toEqual(first.data);
        expect(await workRowsOf(db, key('null-argument'))).toHaveLength(1);
      });

      it('runs a mutation without a key unguarded, since keys are not required', async () => {
        const answer = await send(app, CREATE, { amount: 3 });
        expect(answer.data?.createCharge?.amount).toBe(3);
        expect(await records.of('unguarded')).toBeUndefined();
      });
    });

    describe("the key in a header (the HTTP routes' headerName), shared by the fields of a document", () => {
      const app = useTestApp(() => graphqlApp(store, db, false, { required: true }, { headerName: 'Request-Key' }));
      const records = recordsOf(app, db);
      const ALIASED = 'mutation { first: createCharge(amount: 1) { run } second: createCharge(amount: 2) { run } }';

      it('keeps a record per field (its alias), and replays both on a retry of the document', async () => {
        const headers = { 'Request-Key': 'aliased' };
        const first = await send(app, ALIASED, {}, headers);
        expect(first.data).toEqual({ first: { run: expect.any(Number) }, second: { run: expect.any(Number) } });
        expect(first.data?.first?.run).not.toBe(first.data?.second?.run);
        expect(await send(app, ALIASED, {}, headers)).toEqual(first);
        const endpoints = (await records.all()).filter((record) => record.key === 'aliased');
        expect(endpoints.map(({ endpoint }) => endpoint)).toEqual([
          'graphql Mutation.createCharge as first',
          'graphql Mutation.createCharge as second',
        ]);
      });

      it('refuses a mutation without a key where keys are required: IDEMPOTENCY_KEY_REQUIRED', async () => {
        const answer = await send(app, 'mutation { createCharge(amount: 9) { run } }', {});
        expect(answer.status).toBe(200);
        expect(answer.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_KEY_REQUIRED' });
      });

      it('reads a quoted key (an sf-string) as HTTP routes do: the same key as the bare one', async () => {
        const mutation = 'mutation { createCharge(amount: 8) { run } }';
        const bare = await send(app, mutation, {}, { 'Request-Key': 'quoted' });
        expect(await send(app, mutation, {}, { 'Request-Key': '"quoted"' })).toEqual(bare);
        expect(await workRowsOf(db, 'quoted')).toHaveLength(1);
      });

      it('passes a query of a resolver marked as a whole, unclaimed and without a warning', async () => {
        const headers = { 'Request-Key': 'a-query' };
        for (let i = 0; i < 2; i += 1) expect(await send(app, '{ health }', {}, headers)).toEqual(ANSWERED_OK);
        expect(app.logger.warnings).toEqual([]);
        expect(await records.of('a-query')).toBeUndefined();
      });

      it('refuses an invalid key: IDEMPOTENCY_KEY_INVALID', async () => {
        const answer = await send(app, 'mutation { createCharge(amount: 9) { run } }', {}, { 'Request-Key': 'a b' });
        expect(answer.status).toBe(200);
        expect(answer.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_KEY_INVALID' });
      });

      it("refuses, as the client's to shorten, an alias too long for the records table, never as an outage", async () => {
        const alias = `a${'x'.repeat(2999)}`;
        const key = 'k'.repeat(255);
        const mutation = `mutation { ${alias}: createCharge(amount: 10) { run } }`;
        for (let attempt = 0; attempt < 2; attempt += 1) {
          const answer = await send(app, mutation, {}, { 'Request-Key': key });
          expect(answer.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_KEY_INVALID' });
          expect(answer.errors?.[0].message).toContain('longer than 1000 bytes');
        }
        expect(await workRowsOf(db, key)).toHaveLength(0);
        expect(app.logger.errors.filter((line) => line.includes('store is unavailable'))).toEqual([]);
      });
    });

    describe.each(
      (
        [
          ['standard', false, 'IDEMPOTENCY_OUTCOME_WITHHELD', 1],
          ['transactional', true, 'IDEMPOTENCY_MISCONFIGURED', 0],
        ] as const
      ).filter(([mode]) => modesOn(store).includes(mode)),
    )('%s mode, a redact hook that throws', (mode, transactional, code, rowsKept) => {
      const redact = () => {
        throw new Error('the hook failed');
      };
      const app = useTestApp(() => graphqlApp(store, db, transactional, { keyArgument: 'idempotencyKey' }, { redact }));
      const records = recordsOf(app, db);

      it(`answers ${code} to the mutation and its retries, its work kept ${rowsKept} time(s)`, async () => {
        const key = `redact-throws-${mode}`;
        const first = await send(app, CREATE, { amount: 8, key });
        expect(first.errors?.[0].extensions).toEqual({ code });
        for (let retry = 0; retry < 2; retry += 1) {
          expect((await send(app, CREATE, { amount: 8, key })).errors?.[0]).toEqual(first.errors?.[0]);
        }
        expect(await workRowsOf(db, key)).toHaveLength(rowsKept);
        // Standard mode stores a stand-in, which its retries get; transactional mode releases the key.
        expect(await statusOf(records, key)).toBe(transactional ? undefined : 'completed');
      });
    });

    describe("a module-wide isFinalStatus that releases a 404 (HTTP's option, which GraphQL's HttpExceptions follow)", () => {
      const notFoundReleased = (status: number) => status < 500 && status !== 404;
      const app = useTestApp(() =>
        graphqlApp(store, db, false, { keyArgument: 'idempotencyKey' }, { isFinalStatus: notFoundReleased }),
      );
      const records = recordsOf(app, db);

      it("releases the resolver's NotFoundException rather than store it, and stores a value", async () => {
        const missing = await send(app, CREATE, { amount: 1, key: 'released-404', mode: 'missing' });
        expect(missing.errors?.[0].message).toBe('no such customer');
        expect(await statusOf(records, 'released-404')).toBeUndefined();
        await send(app, CREATE, { amount: 2, key: 'stored-value' });
        expect(await statusOf(records, 'stored-value')).toBe('completed');
      });
    });
  });

  describe('@Idempotent() on a resolver method the module never claims', () => {
    @ObjectType()
    class Account {
      @Field(() => String)
      id!: string;
    }

    @Resolver(() => Account)
    class MarkedByMistake {
      @Idempotent()
      @Query(() => Account)
      account(): Account {
        return { id: 'a' };
      }

      @Idempotent()
      @ResolveField(() => String)
      name(): string {
        return 'name';
      }
    }

    it('is refused at start-up, naming each method and the fix', async () => {
      const starting = startTestApp({
        database: 'memory',
        idempotency: { singleTenant: true },
        providers: [MarkedByMistake],
        imports: [
          GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
          IdempotencyGraphQLModule.forRoot(),
        ],
      });
      const error = await starting.then(
        async (app) => app.close(),
        (reason: unknown) => reason,
      );
      expect(error).toBeInstanceOf(IdempotencySetupError);
      expect((error as Error).message).toContain(
        '@Idempotent() is on MarkedByMistake.account (a Query), MarkedByMistake.name (a field resolver), which the ' +
          'module never claims',
      );
      expect((error as Error).message).toContain('Remove @Idempotent() there');
    });
  });

  describe('with the database unreachable', () => {
    const db = useTestDatabase(WORK_LOG);
    const proxy = useTcpProxy(db);
    const app = useTestApp(
      () => graphqlApp('postgres', { url: proxy.urlFor(db.url) }, true, { keyArgument: 'idempotencyKey' }),
      () => proxy.bringUp(),
    );

    it('answers IDEMPOTENCY_STORE_UNAVAILABLE with a retry hint, and runs nothing', async () => {
      proxy.takeDown();
      const answer = await send(app, CREATE, { amount: 4, key: 'store-down' });
      proxy.bringUp();
      expect(answer.status).toBe(200);
      expect(answer.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE', retryAfterSeconds: 1 });
      expect(app.logger.errors).toContainEqual(expect.stringContaining('(the store is unavailable)'));
      await waitFor(async () => ((await workRowsOf(db, 'store-down')).length === 0 ? true : undefined), 'no run');
    });

    it('answers IDEMPOTENCY_STORE_UNAVAILABLE when it is lost before the commit, keeping nothing; a retry runs', async () => {
      const gate = new Gate();
      gates.set('lost-mid-run', gate);
      const variables = { amount: 6, key: 'lost-mid-run', mode: 'gated' };
      const first = send(app, CREATE, variables);
      await gate.reached;
      proxy.takeDown();
      gate.release();
      const refused = await first;
      proxy.bringUp();
      expect(refused.status).toBe(200);
      expect(refused.errors?.[0].extensions).toEqual({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE', retryAfterSeconds: 1 });
      expect(await workRowsOf(db, 'lost-mid-run')).toEqual([]);
      // The claim's holder died with its connection: the retry takes the key over at once, and runs once.
      const retry = await waitFor(async () => {
        const answer = await send(app, CREATE, variables);
        return answer.data?.createCharge ? answer : undefined;
      }, 'a retry to run');
      expect(await workRowsOf(db, 'lost-mid-run')).toEqual([
        expect.objectContaining({ id: retry.data?.createCharge?.run }),
      ]);
    });
  });
});
