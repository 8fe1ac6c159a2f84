import { randomUUID } from 'node:crypto';
import { Logger } from '@nestjs/common';
import { IdempotencyRun } from '../../src/index.js';
import { type IdempotencyStore, type StoreTransaction } from '../../src/store/index.js';
import { ClaimEnding } from '../../src/protocol/claim-ending.js';
import { IdempotencyTelemetry } from '../../src/protocol/idempotency-telemetry.js';
import { resolvePolicy } from '../../src/protocol/idempotency-policy.js';
import { OutcomeSealing } from '../../src/protocol/outcome-sealing.js';
import { RecordingLogger } from '../support/recording-logger.js';

/** A transaction whose database never answers its rollback or commit. */
class StalledTransaction implements StoreTransaction {
  abandoned = false;
  readonly connectionLost = false;
  commit = () => new Promise<void>(() => undefined);
  rollback = () => new Promise<void>(() => undefined);
  abandon(): void {
    this.abandoned = true;
  }
}

const logger = new RecordingLogger();
beforeAll(() => Logger.overrideLogger(logger));

describe('ending a transaction the database does not answer', () => {
  const scope = (key: string) => `key "${key}" of POST /x`;
  it.each([
    [
      'rolls back',
      { response: undefined, failed: true, final: false },
      (key: string) => `Ending the transaction of ${scope(key)} failed: Error: rolling back`,
    ],
    [
      'commits',
      { response: { status: 201, headers: {}, body: Buffer.from('{}') }, failed: false, final: true },
      (key: string) =>
        `Committing the work and outcome of ${scope(key)} failed; the attempt is refused as the store being unavailable, and its retry gets the outcome if ` +
        'the commit went through after all, or runs again: Error: committing',
    ],
  ])('gives up after storeTimeoutSeconds when it %s, and cuts the connection', async (_case, outcome, failure) => {
    const store = {
      release: async () => true,
      complete: async () => true,
    } as unknown as IdempotencyStore;
    const claims = new ClaimEnding(
      store,
      new Logger('Idempotency'),
      OutcomeSealing.from(undefined),
      new IdempotencyTelemetry(),
      () => undefined,
    );
    const transaction = new StalledTransaction();
    const key = randomUUID();
    const run = new IdempotencyRun(
      { scope: { account: 'acct', endpoint: 'POST /x', key }, attempt: randomUUID() },
      false,
      transaction,
    );
    const policy = resolvePolicy({ storeTimeoutSeconds: 0.05 });
    await claims.end(run, outcome, policy, () => ({ key: 'Idempotency-Key', usedWith: 'request' }));
    expect(transaction.abandoned).toBe(true);
    expect(logger.errors).toContain(
      `ERROR [Idempotency] ${failure(key)} took longer than storeTimeoutSeconds (0.05 s)`,
    );
  });
});
