import request from 'supertest';
import { PLATFORMS, spawnSampleApp, type SpawnedApp } from '../support/sample-app.js';
import { useTestDatabase } from '../support/test-database.js';

interface OpenApiOperation {
  parameters?: { name: string; in: string; required?: boolean }[];
  responses: Record<string, { headers?: Record<string, unknown>; content?: Record<string, { schema: object }> }>;
}

const db = useTestDatabase();

describe.each(PLATFORMS)('the sample app’s OpenAPI document, with the ietf profile, on %s', (platform) => {
  let app: SpawnedApp;

  beforeAll(async () => {
    app = await spawnSampleApp({
      DATABASE_URL: db.url,
      DATABASE_POOL_SIZE: '2',
      PAYOUT_WORKER: 'false',
      SAMPLE_PLATFORM: platform,
      IDEMPOTENCY_PROFILE: 'ietf',
    });
  });

  afterAll(async () => {
    await app?.close();
  });

  const operation = async (path: string, method: string): Promise<OpenApiOperation> => {
    const response = await request(app.url).get('/docs-json').expect(200);
    return (response.body as { paths: Record<string, Record<string, OpenApiOperation>> }).paths[path][method];
  };

  it('documents the key header, the replay header, and 409, 422 and 503 as problem details on POST /v1/charges', async () => {
    const create = await operation('/v1/charges', 'post');
    expect(create.parameters).toContainEqual(
      expect.objectContaining({ name: 'Idempotency-Key', in: 'header', required: true }),
    );
    expect(create.responses['2XX'].headers).toHaveProperty('Idempotent-Replay');
    for (const status of ['400', '409', '415', '422', '500', '503']) {
      const schema = create.responses[status].content?.['application/problem+json'].schema;
      expect(schema).toMatchObject({ required: ['type', 'title', 'status', 'detail', 'code'] });
    }
    expect(create.responses['409'].headers).toHaveProperty('Retry-After');
    expect(create.responses['503'].headers).toHaveProperty('Retry-After');
    expect(create.responses['422'].content?.['application/problem+json'].schema).toMatchObject({
      properties: { code: { enum: ['idempotency_key_reuse'] } },
    });
  });

  it('documents the key as optional where @Idempotent() says so (PATCH /v1/charges/{id})', async () => {
    const update = await operation('/v1/charges/{id}', 'patch');
    expect(update.parameters).toContainEqual(
      expect.objectContaining({ name: 'Idempotency-Key', in: 'header', required: false }),
    );
    expect(
      update.responses['400'].content?.['application/problem+json'].schema as { properties: { code: object } },
    ).toMatchObject({ properties: { code: { enum: ['idempotency_key_invalid'] } } });
  });

  it('leaves the routes that are not idempotent alone', async () => {
    const list = await operation('/v1/charges', 'get');
    expect(list.parameters?.some(({ name }) => name === 'Idempotency-Key')).toBe(false);
  });

  it(
    platform === 'express' ? 'serves the UI at /docs' : 'serves no UI on Fastify (it needs @fastify/static)',
    async () => {
      const response = await request(app.url).get('/docs');
      if (platform === 'express') {
        expect(response.status).toBe(200);
        expect(response.text).toContain('swagger-ui');
      } else {
        expect(response.status).toBe(404);
      }
    },
  );
});
