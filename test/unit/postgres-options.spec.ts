import { resolvePostgresSettings } from '../../src/postgres/postgres-options.js';

// The PostgreSQL room's options, checked at start-up with the wording of every room's.
describe('resolvePostgresSettings', () => {
  it('defaults to the data source left alone and escaping writes logged', () => {
    expect(resolvePostgresSettings({})).toEqual({
      tableName: 'idempotency_records',
      enlist: false,
      onEscape: 'log',
      transactionPooler: false,
      batching: { maxBatchSize: 64, maxInFlight: 2 },
    });
  });

  // Review of issue #10: `enlistDataSource: 'false'` (from the environment) turns enlistment on.
  it('refuses an enlistDataSource that is not a boolean, saying what it got', () => {
    expect(() => resolvePostgresSettings({ enlistDataSource: 'false' as unknown as boolean })).toThrow(
      /enlistDataSource.*got the string "false"/,
    );
  });

  it('refuses an unknown way to handle escaping writes', () => {
    expect(() => resolvePostgresSettings({ onTransactionEscape: 'warn' as 'log' })).toThrow(/onTransactionEscape/);
  });

  it('refuses a tableName that is not a non-empty string', () => {
    expect(() => resolvePostgresSettings({ tableName: 5 as unknown as string })).toThrow(
      /tableName must be a non-empty string, got the number 5/,
    );
  });

  it('refuses a transactionPooler that is not a boolean, saying what it got', () => {
    expect(() => resolvePostgresSettings({ transactionPooler: 'true' as unknown as boolean })).toThrow(
      /transactionPooler must be true or false, got the string "true"/,
    );
  });

  it('takes a listenConnection as a URL or a node-postgres ClientConfig, and refuses anything else', () => {
    expect(resolvePostgresSettings({ listenConnection: 'postgres://db:5432/app' }).listenConnection).toEqual({
      connectionString: 'postgres://db:5432/app',
    });
    expect(resolvePostgresSettings({ listenConnection: { host: 'db', port: 5432 } }).listenConnection).toEqual({
      host: 'db',
      port: 5432,
    });
    for (const [value, got] of [
      ['', 'the string ""'],
      [5432, 'the number 5432'],
      [null, 'null'],
      [['postgres://db'], 'an array'],
    ] as const) {
      expect(() => resolvePostgresSettings({ listenConnection: value as unknown as string })).toThrow(
        `listenConnection must be a postgres:// URL or a node-postgres ClientConfig, got ${got}`,
      );
    }
  });

  it('coalesces statements by default, takes bounds or false, and refuses what is neither', () => {
    expect(resolvePostgresSettings({}).batching).toEqual({ maxBatchSize: 64, maxInFlight: 2 });
    expect(resolvePostgresSettings({ batching: { maxInFlight: 1 } }).batching).toEqual({
      maxBatchSize: 64,
      maxInFlight: 1,
    });
    expect(resolvePostgresSettings({ batching: false }).batching).toBe(false);
    expect(() => resolvePostgresSettings({ batching: { maxBatchSize: 0 } })).toThrow(
      /batching.maxBatchSize must be a positive integer, got the number 0/,
    );
    expect(() => resolvePostgresSettings({ batching: { maxInFlight: 1.5 } })).toThrow(
      /batching.maxInFlight must be a positive integer/,
    );
    expect(() => resolvePostgresSettings({ batching: true as unknown as false })).toThrow(
      /batching must be false or \{ maxBatchSize, maxInFlight \}, got the boolean true/,
    );
  });
});
