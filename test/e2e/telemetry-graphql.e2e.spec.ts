import { randomUUID } from 'node:crypto';
import { GraphQLClient } from 'graphql-request';
import { ALICE, startSampleApp } from '../support/sample-app.js';
import { InMemoryTelemetry } from '../support/telemetry.js';
import { useTestDatabase } from '../support/test-database.js';

// Registered before the application is created, as an application registers its SDK.
let telemetry: InMemoryTelemetry;
beforeAll(() => {
  telemetry = new InMemoryTelemetry();
});
afterAll(() => telemetry.stop());

const db = useTestDatabase();
let app: Awaited<ReturnType<typeof startSampleApp>> | undefined;
afterAll(() => app?.close());

it('counts a GraphQL mutation under the graphql transport and its field, and its replay', async () => {
  app = await startSampleApp({ databaseUrl: db.url, databasePoolSize: 5 });
  const client = new GraphQLClient(`${app.url}/graphql`, { headers: { authorization: `Bearer ${ALICE}` } });
  const mutation =
    'mutation($input: ChargeInput!, $key: String) { createCharge(input: $input, idempotencyKey: $key) { id } }';
  const variables = { input: { amount: 900, currency: 'eur' }, key: randomUUID() };
  await client.request(mutation, variables);
  await client.request(mutation, variables);

  const graphql = { 'idempotency.transport': 'graphql', 'idempotency.endpoint': 'graphql Mutation.createCharge' };
  const outcomes = (outcome: string) =>
    telemetry.count('idempotency.outcomes', { ...graphql, 'idempotency.outcome': outcome });
  await expect(outcomes('new')).resolves.toBe(1);
  await expect(outcomes('stored')).resolves.toBe(1);
  await expect(outcomes('replay.memory')).resolves.toBe(1);
  const spans = telemetry.finishedSpans().filter((span) => span.attributes['idempotency.transport'] === 'graphql');
  expect(spans.map((span) => span.name)).toEqual(
    expect.arrayContaining(['idempotency claim', 'idempotency run', 'idempotency finalize']),
  );
});

it('names a mutation by its field, never by the aliases a client chooses (one series, however many aliases)', async () => {
  app ??= await startSampleApp({ databaseUrl: db.url, databasePoolSize: 5 });
  const key = randomUUID();
  const client = new GraphQLClient(`${app.url}/graphql`, {
    headers: { authorization: `Bearer ${ALICE}`, 'idempotency-key': key },
  });
  const aliases = Array.from({ length: 20 }, (_, index) => `charge${index}`);
  const fields = aliases.map((alias) => `${alias}: createCharge(input: $input) { id }`).join(' ');
  await client.request(`mutation($input: ChargeInput!) { ${fields} }`, { input: { amount: 700, currency: 'eur' } });

  const endpoints = new Set(
    (await telemetry.allPoints())
      .map((point) => point.attributes['idempotency.endpoint'])
      .filter((endpoint) => typeof endpoint === 'string' && endpoint.startsWith('graphql')),
  );
  expect([...endpoints]).toEqual(['graphql Mutation.createCharge']);
  // Each aliased field has its record all the same, under the one key.
  const records = await db.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM idempotency_records WHERE idempotency_key = $1',
    [key],
  );
  expect(records[0].n).toBe(aliases.length);
  const spans = telemetry.finishedSpans().filter((span) => span.attributes['idempotency.transport'] === 'graphql');
  expect(new Set(spans.map((span) => span.attributes['idempotency.endpoint']))).toEqual(
    new Set(['graphql Mutation.createCharge']),
  );
});
