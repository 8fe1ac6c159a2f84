import { randomUUID } from 'node:crypto';
import {
  type BurstAnswer,
  chargeBurst,
  PLATFORMS,
  type RunningApp,
  spawnSampleApp,
  startSampleApp,
} from '../support/sample-app.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(() => db?.drop());

async function expectExactlyOneCharge(results: BurstAnswer[], apiKey: string) {
  const statuses = results.map((result) => result.status);
  expect(statuses.filter((status) => status >= 500)).toEqual([]);
  expect(statuses.every((status) => status === 201 || status === 409)).toBe(true);
  const firstRuns = results.filter((result) => result.status === 201 && result.replay === null);
  expect(firstRuns).toHaveLength(1);
  const charges = await db.query<{ id: string }>('SELECT id FROM charges WHERE account = $1', [apiKey]);
  expect(charges).toEqual([{ id: firstRuns[0].body.id }]);
  for (const replay of results.filter((result) => result.status === 201 && result.replay === 'true')) {
    expect(replay.body.id).toBe(firstRuns[0].body.id);
  }
  for (const conflict of results.filter((result) => result.status === 409)) {
    expect(conflict.body.error).toBe('request_in_progress');
  }
}

describe.each(PLATFORMS)("concurrent attempts with one key (the seed's third test), on %s", (platform) => {
  let app: RunningApp;

  beforeAll(async () => {
    app = await startSampleApp({ databaseUrl: db.url, providerDelayMs: 50, platform });
  });

  // Each app's pool keeps its connections, and the server allows 100 in all, shared with the other test file Jest runs.
  afterAll(() => app?.close());

  it.each([8, 64])(
    '%i concurrent requests make exactly one charge; the others are 201 replays or 409s',
    async (count) => {
      const apiKey = `sk_test_burst_${count}_${platform}`;
      const results = await chargeBurst([app.url], Array<string>(count).fill(randomUUID()), apiKey);
      await expectExactlyOneCharge(results, apiKey);
    },
  );
});

describe.each(PLATFORMS)('concurrent attempts with one key on two instances, on %s', (platform) => {
  let instances: RunningApp[] = [];

  afterAll(() => Promise.all(instances.map((instance) => instance.close())));

  it('64 concurrent requests across two instances of the app sharing one database make exactly one charge', async () => {
    // Pools of 10: the two processes' 64 requests then need at most 2 x (10 + the provider's 4) of the server's 100
    // connections, which the other test file Jest runs beside this one also draws on ("too many clients already").
    const env = { DATABASE_URL: db.url, DATABASE_POOL_SIZE: '10', PROVIDER_DELAY_MS: '50', SAMPLE_PLATFORM: platform };
    instances = await Promise.all([spawnSampleApp(env), spawnSampleApp(env)]);
    const apiKey = `sk_test_two_instances_${platform}`;
    const urls = instances.map((instance) => instance.url);
    const results = await chargeBurst(urls, Array<string>(64).fill(randomUUID()), apiKey);
    await expectExactlyOneCharge(results, apiKey);
  });
});
