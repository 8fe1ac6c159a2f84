import type { TestDatabase } from './test-database.js';
import { waitFor } from './wait-for.js';

/**
 * Watches the record of `key` until it is `seconds` old by the database clock, expecting its lease to be live at
 * every look and `retry` (which asserts the key is refused) to hold meanwhile: a lease that lapsed between two
 * renewals is noticed, not only that a renewal happened at last.
 */
export async function expectHeldThroughout(
  db: TestDatabase,
  key: string,
  seconds: number,
  retry: () => Promise<unknown>,
) {
  await waitFor(
    async () => {
      const [row] = await db.query<{ live: boolean; done: boolean }>(
        `SELECT locked_until > now() AS live, now() > created_at + make_interval(secs => $2) AS done
         FROM idempotency_records WHERE idempotency_key = $1`,
        [key, seconds],
      );
      expect(row).toMatchObject({ live: true });
      await retry();
      return row.done ? true : undefined;
    },
    `the key to be held for ${seconds} s`,
    seconds * 1000 + 15_000,
  );
}
