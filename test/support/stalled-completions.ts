import pg from 'pg';
import type { HeldLock } from './hold-lock.js';

/** The advisory lock the trigger of `stallCompletions` waits for. */
const STALL_LOCK = 7_240_001;

/**
 * Makes every UPDATE that completes a record of `table` wait (in a trigger) for a lock the returned handle holds, as
 * a database that stops answering mid-commit would; letting go removes the trigger. The outcome's UPDATE of a
 * transactional run is sent with its COMMIT, so it is the one statement a lock of the test's can stall.
 */
export async function stallCompletions(url: string, table = 'idempotency_records'): Promise<HeldLock> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`
    CREATE OR REPLACE FUNCTION test_stall_completion() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.status = 'completed' THEN PERFORM pg_advisory_xact_lock_shared(${STALL_LOCK}); END IF;
      RETURN NEW;
    END $$`);
  await client.query(`SELECT pg_advisory_lock(${STALL_LOCK})`);
  await client.query(
    `CREATE TRIGGER test_stall_completion BEFORE UPDATE ON ${table} FOR EACH ROW EXECUTE FUNCTION test_stall_completion()`,
  );
  return {
    letGo: async () => {
      await client.query(`SELECT pg_advisory_unlock(${STALL_LOCK})`);
      await client.query(`DROP TRIGGER test_stall_completion ON ${table}`);
      await client.end();
    },
  };
}
