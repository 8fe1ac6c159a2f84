import { resolvePostgresSettings } from '../../src/postgres/postgres-options.js';

// The PostgreSQL room's options, checked at start-up with the wording of every room's.
describe('resolvePostgresSettings', () => {
  it('defaults to the data source left alone and escaping writes logged', () => {
    expect(resolvePostgresSettings({})).toEqual({ tableName: 'idempotency_records', enlist: false, onEscape: 'log' });
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
});
