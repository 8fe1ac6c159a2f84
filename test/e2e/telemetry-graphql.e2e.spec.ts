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
