import type { Pool, PoolClient } from 'pg';
import { DataSource } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import { idempotencyMigrations } from '../../src/postgres/index.js';
import { BatchConnections } from '../../src/postgres/batch-connections.js';
import { changeChannel, recordStatements, type Statement } from '../../src/postgres/record-statements.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

// A named statement's generic plan is made once per connection, from the table's statistics of that moment, and kept
// until an ANALYZE. Made while the records table was analyzed empty, a batch's plan joined its items to the whole
// table by a hash and a sequential scan, and kept scanning it as it grew (26 ms a claim batch at 157,000 records).
// On the batches' own connections every statement reaches a record by its key, whatever the statistics say.

const TABLE = 'idempotency_records';
const statements = recordStatements(TABLE, changeChannel(TABLE));
// Every statement that runs on the batches' connections: the batches, the probe for held records, and the single
// statements that a failed batch's items are sent again as.
const onBatchConnections: Array<[string, Statement]> = [
  ['claimBatch', statements.claimBatch],
  ['completeBatch', statements.completeBatch],
  ['releaseBatch', statements.releaseBatch],
  ['lockedRecords', statements.lockedRecords],
  ['claim', statements.claim],
  ['complete', statements.complete],
  ['release', statements.release],
];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

/** Every node of `plan` that reads or changes the records table. */
function recordsNodes(plan: PlanNode): PlanNode[] {
  const own = plan['Relation Name'] === TABLE ? [plan] : [];
  return [...own, ...(plan.Plans ?? []).flatMap(recordsNodes)];
}

/** How a node reaches the records it reads: by the key of each, by the address of each, or otherwise (the table). */
function reachedBy(node: PlanNode): string {
  const condition = node['Index Cond'] ?? '';
  if (/^Index (Only )?Scan$/.test(node['Node Type']) && /idempotency_key\)?(::text)? = /.test(condition))
    return 'its key';
  if (node['Node Type'] === 'Tid Scan') return 'its address';
  return `${node['Node Type']} ${condition}`.trim();
}

let db: TestDatabase;
let dataSource: DataSource;
let connections: BatchConnections;
let client: PoolClient;
let release: (discard?: Error) => void;

beforeAll(async () => {
  db = await createTestDatabase();
  dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: idempotencyMigrations() });
  await dataSource.initialize();
  await dataSource.runMigrations();
  // The statistics of a table analyzed while empty: the planner believes a scan of it costs nothing.
  await db.query(`VACUUM ANALYZE ${TABLE}`);
  connections = new BatchConnections(() => (dataSource.driver as PostgresDriver).master as Pool, 1, true);
  [client, release] = await connections.connect();
  // What a connection keeps after a statement's sixth execution, asked for at once.
  await client.query('SET plan_cache_mode = force_generic_plan');
});

afterAll(async () => {
  release?.(new Error('its session was changed by the test'));
  await connections?.close();
  await dataSource?.destroy();
  await db?.drop();
});

it.each(onBatchConnections)(
  'plans %s on a batch connection to reach each record by its key or its address, on a table analyzed empty',
  async (name, statement) => {
    await client.query(`PREPARE ${name} AS ${statement.text}`);
    const [{ parameters }] = (
      await client.query<{ parameters: number }>(
        'SELECT cardinality(parameter_types) AS parameters FROM pg_prepared_statements WHERE name = $1',
        [name.toLowerCase()],
      )
    ).rows;
    const nulls = Array.from({ length: parameters }, () => 'NULL').join(', ');
    const [{ 'QUERY PLAN': explained }] = (
      await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(`EXPLAIN (FORMAT JSON) EXECUTE ${name}(${nulls})`)
    ).rows;
    const reads = recordsNodes(explained[0].Plan).filter((node) => node['Node Type'] !== 'ModifyTable');

    expect(reads.length).toBeGreaterThan(0);
    for (const node of reads) expect(reachedBy(node)).toMatch(/^(its key|its address)$/);
  },
);

/** The test database's URL in the form of a socket's, its host and port in the query: no URL parser takes it. */
function hostless(url: string, query: string): string {
  const { username, password, hostname, port, pathname } = new URL(url);
  const user = password ? `${username}:${password}` : username;
  return `postgres://${user}@${pathname}?host=${hostname}&port=${port || 5432}&${query}`;
}

it.each([
  ['in its connection string', (url: string) => ({ url: `${url}?options=-c%20statement_timeout%3D4321` }), undefined],
  [
    'in a connection string without a host',
    (url: string) => ({ url: hostless(url, 'options=-c%20statement_timeout%3D4321') }),
    undefined,
  ],
  ['in its config', (url: string) => ({ url, extra: { options: '-c statement_timeout=4321' } }), undefined],
  ['in PGOPTIONS', (url: string) => ({ url }), '-c statement_timeout=4321'],
])(
  "starts each batch connection with the batches' settings and the application's own startup options %s",
  async (_, settingsOf, pgOptions: string | undefined) => {
    const before = process.env.PGOPTIONS;
    if (pgOptions) process.env.PGOPTIONS = pgOptions;
    const application = new DataSource({ type: 'postgres', ...settingsOf(db.url) });
    await application.initialize();
    const ownConnections = new BatchConnections(() => (application.driver as PostgresDriver).master as Pool, 1, true);
    try {
      const [connection, done] = await ownConnections.connect();
      const settings = await connection.query<Record<string, string>>(
        "SELECT current_setting('enable_seqscan') AS seqscan, current_setting('lock_timeout') AS lock, current_setting('statement_timeout') AS statement",
      );
      done();
      expect(settings.rows).toEqual([{ seqscan: 'off', lock: '500ms', statement: '4321ms' }]);
    } finally {
      if (before === undefined) delete process.env.PGOPTIONS;
      else process.env.PGOPTIONS = before;
      await ownConnections.close();
      await application.destroy();
    }
  },
);
