import { randomUUID } from 'node:crypto';
import { Controller, Post } from '@nestjs/common';
import { jest } from '@jest/globals';
import request from 'supertest';
import { Idempotent } from '../../src/index.js';
import { ClaimEnding } from '../../src/protocol/claim-ending.js';
import { useTestApp } from '../support/test-app.js';
import { recordCountOf, useTestDatabase } from '../support/test-database.js';

/**
 * A fault inside an attempt's end (a bug of the module's, planted here: the end throws before it stores or releases
 * anything). Outside a transaction the handler's work stands, so its caller gets its outcome, as when a finalize
 * fails; inside one, the work is in doubt, and the caller is refused as the store's fault.
 */
let runs = 0;

@Controller('work')
class WorkController {
  @Post('standard')
  @Idempotent()
  standard() {
    return { run: (runs += 1) };
  }

  @Post('transactional')
  @Idempotent({ transactional: true })
  transactional() {
    return { run: (runs += 1) };
  }
}

describe("a fault inside an attempt's end", () => {
  const db = useTestDatabase();
  const app = useTestApp(() => ({
    database: db,
    pool: { max: 4 },
    idempotency: { singleTenant: true },
    controllers: [WorkController],
  }));

  afterEach(() => jest.restoreAllMocks());

  const post = (path: string, key: string = randomUUID()) =>
    request(app.url).post(`/work/${path}`).set('Idempotency-Key', key).send({});

  it("answers the handler's outcome outside a transaction: its work stands, and is not refused as undone", async () => {
    jest.spyOn(ClaimEnding.prototype, 'end').mockRejectedValueOnce(new Error('a planted fault'));
    const answer = await post('standard').expect(201);
    expect(answer.body).toEqual({ run: runs });
    expect(app.logger.errors).toContainEqual(
      expect.stringMatching(/Ending the claim of .* failed: Error: a planted fault/),
    );
  });

  it('answers 503 inside a transaction, rolled back and its key released: the retry runs at once', async () => {
    jest.spyOn(ClaimEnding.prototype, 'end').mockRejectedValueOnce(new Error('a planted fault'));
    const key = randomUUID();
    const answer = await post('transactional', key).expect(503);
    expect(answer.body).toMatchObject({ error: 'idempotency_store_unavailable' });
    expect(answer.headers['retry-after']).toBe('2');
    expect(await recordCountOf(db, key)).toBe(0);
    const retry = await post('transactional', key).expect(201);
    expect(retry.body).toEqual({ run: runs });
  });
});
