import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import request from 'supertest';
import { postCharge, type SpawnedApp, spawnSampleApp } from '../support/sample-app.js';
import { useTestDatabase } from '../support/test-database.js';

/** A port free now on the loopback interface (the exporter needs a port of its own, told in advance). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** The value of the first Prometheus sample of `metric` whose labels include every one of `labels`; 0 when none. */
function sampleOf(exposition: string, metric: string, labels: string[]): number {
  const line = exposition
    .split('\n')
    .find((candidate) => candidate.startsWith(`${metric}{`) && labels.every((label) => candidate.includes(label)));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const db = useTestDatabase();
let app: SpawnedApp | undefined;
afterAll(async () => {
  await app?.close();
});

it('serves the module metrics to Prometheus on METRICS_PORT: a charge moves idempotency_outcomes_total', async () => {
  const metricsPort = await freePort();
  app = await spawnSampleApp({
    DATABASE_URL: db.url,
    DATABASE_POOL_SIZE: '3',
    PAYOUT_WORKER: 'false',
    METRICS_PORT: String(metricsPort),
  });
  expect(app.output()).toContain(`metrics on port ${metricsPort} at /metrics`);
  const scrape = async () => (await request(`http://127.0.0.1:${metricsPort}`).get('/metrics').expect(200)).text;
  const newCharges = (exposition: string) =>
    sampleOf(exposition, 'idempotency_outcomes_total', [
      'idempotency_outcome="new"',
      'idempotency_transport="http"',
      'idempotency_endpoint="POST /v1/charges"',
    ]);

  const before = await scrape();
  await postCharge(app.url, { amount: 100, currency: 'eur' }, randomUUID()).expect(201);
  const after = await scrape();
  expect(newCharges(after)).toBe(newCharges(before) + 1);
  // This exporter keeps the unit in `# UNIT` rather than in the name (no `_seconds` suffix).
  expect(after).toContain('# UNIT idempotency_store_operation_duration s');
  expect(after).toMatch(
    /^idempotency_store_operation_duration_bucket\{idempotency_store_operation="claim",.*le="0.005"\}/m,
  );
  expect(after).toMatch(
    /^idempotency_handler_duration_count\{idempotency_transport="http",idempotency_endpoint="POST \/v1\/charges",.*\} 1$/m,
  );
});
