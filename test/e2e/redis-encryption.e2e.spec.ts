import { randomBytes, randomUUID } from 'node:crypto';
import { Controller, Header, Post } from '@nestjs/common';
import request from 'supertest';
import { Idempotent } from '../../src/index.js';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import { madeBeforeAll } from '../support/made-before-all.js';
import { newRedisClient, redis } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';
import { startTestApp } from '../support/test-app.js';

// The module's `encryption` on the Redis store: the outcome is sealed before the store sees it, so what Redis holds
// of a completed record (its `rb` and `rh` fields) is ciphertext, and a retry still replays the plaintext.

const keyPrefix = `test:${randomBytes(4).toString('hex')}:encryption:`;
/** What must never reach Redis in clear: in the body, and in a stored header. */
const BODY_MARKER = 'PLAINTEXT-BODY-MARKER-4242';
const HEADER_MARKER = 'PLAINTEXT-HEADER-MARKER';

@Controller('charges')
class ChargesController {
  @Post()
  @Idempotent()
  @Header('x-card-hint', HEADER_MARKER)
  create() {
    return { id: `ch_${randomUUID()}`, amount: 1200, card: BODY_MARKER };
  }
}

describeWith(redis, 'encryption at rest on the Redis store', () => {
  /** The application, and the client it keeps its records on (closed after it). */
  const made = madeBeforeAll(
    async () => {
      const client = newRedisClient();
      const app = await startTestApp({
        redis: { client, keyPrefix },
        idempotency: {
          singleTenant: true,
          encryption: { keys: [{ id: 'key-a', key: randomBytes(32) }] },
          storedResponseHeaders: ['x-card-hint'],
          // Every retry reads the record from Redis, not from this instance's memory.
          replayCache: false,
        },
        controllers: [ChargesController],
      });
      return { app, client };
    },
    async ({ app, client }) => {
      await app.close();
      await client.quit();
    },
  );

  it('stores no plaintext of the body nor of the headers, keeps the status in clear, and replays the response', async () => {
    const key = randomUUID();
    const { app, client } = made;
    const charge = () => request(app.url).post('/charges').set('Idempotency-Key', key).send({});
    const first = await charge().expect(201);
    expect(first.body.card).toBe(BODY_MARKER);

    const recordKey = new RedisIdempotencyStore(client, { keyPrefix }).keyOf({
      account: '',
      endpoint: 'POST /charges',
      key,
    });
    const [status, headers, body] = await client.hmgetBuffer(recordKey, 'rs', 'rh', 'rb');
    expect(status?.toString()).toBe('201');
    expect(body?.length).toBeGreaterThan(0);
    expect(body?.includes(Buffer.from(BODY_MARKER))).toBe(false);
    expect(body?.includes(Buffer.from('"amount"'))).toBe(false);
    expect(headers?.toString()).not.toContain(HEADER_MARKER);
    expect(headers?.toString()).not.toContain('application/json');

    const replay = await charge().expect(201);
    expect(replay.headers['idempotent-replay']).toBe('true');
    expect(replay.headers['x-card-hint']).toBe(HEADER_MARKER);
    expect(replay.body).toEqual(first.body);
  });
});
