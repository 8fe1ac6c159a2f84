import { recordsOf, type TestRecords } from './test-app.js';
import type { TestDatabase } from './test-database.js';
import { waitFor } from './wait-for.js';

/**
 * Watches the record of `key` until it is `seconds` old by the store's clock, expecting its lease to be live at
 * every look and `retry` (which asserts the key is refused) to hold meanwhile: a lease that lapsed between two
 * renewals is noticed, not only that a renewal happened at last.
 */
export async function expectHeldThroughout(
  db: TestDatabase | TestRecords,
  key: string,
  seconds: number,
  retry: () => Promise<unknown>,
) {
  // The file's database is read as the records of an app on PostgreSQL.
  const records = 'statusOf' in db ? db : recordsOf({}, db);
  await waitFor(
    async () => {
      const record = await records.of(key);
      expect(record).toBeDefined();
      const { leaseUntil, createdAt, readAt } = record!;
      expect(leaseUntil).toBeGreaterThan(readAt);
      await retry();
      return readAt > createdAt + seconds * 1000 ? true : undefined;
    },
    `the key to be held for ${seconds} s`,
    seconds * 1000 + 15_000,
  );
}
