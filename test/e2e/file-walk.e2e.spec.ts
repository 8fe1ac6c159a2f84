import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { rabbitmq, RABBITMQ_URL } from '../support/rabbitmq.js';
import { describeWith } from '../support/required-service.js';
import { useTestDatabase } from '../support/test-database.js';
import type { WalkReport } from '../../scripts/walk-report.js';

/**
 * The walk `npm run walk` prints (scripts/walk.ts), run on this file's database and RabbitMQ: a request and a message
 * through the files of src/, each entry with where it came from. What docs/layout.md says of the walk is what holds.
 */
const db = useTestDatabase();

async function walks(): Promise<{ http: WalkReport; message: WalkReport }> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--import', './scripts/register-walk.mjs', 'scripts/walk.ts', '--json'],
    { env: { ...process.env, NODE_OPTIONS: '', DATABASE_URL: db.url, RABBITMQ_URL }, timeout: 60_000 },
  );
  return JSON.parse(stdout) as { http: WalkReport; message: WalkReport };
}

/** The files the walk entered more than once. */
function filesEnteredAgain(report: WalkReport): string[] {
  const counts = new Map<string, number>();
  for (const { file } of report.entries) counts.set(file, (counts.get(file) ?? 0) + 1);
  return [...counts].filter(([, count]) => count > 1).map(([file]) => file);
}

describeWith(rabbitmq, 'the walk of a call through the files', () => {
  let report: { http: WalkReport; message: WalkReport };
  beforeAll(async () => {
    report = await walks();
  }, 90_000);

  it("one HTTP request goes from the interceptor to the store's claim entering each file once", () => {
    const { entries } = report.http;
    expect(entries[0]).toMatchObject({ file: 'protocol/idempotency.interceptor.ts', from: '@nestjs/core' });
    expect(entries.at(-1)).toMatchObject({ file: 'postgres/postgres-idempotency.store.ts' });
    expect(entries.at(-1)?.fn).toMatch(/\.claim$/);
    // The transport is entered once, by the interceptor, and reads the request in one pass.
    expect(entries.filter(({ file }) => file.startsWith('http/') && !file.startsWith('http/requests/route'))).toEqual([
      expect.objectContaining({ file: 'http/http-transport.ts', from: 'protocol/idempotency.interceptor.ts' }),
      expect.objectContaining({ file: 'http/platforms/express-platform.ts' }),
      expect.objectContaining({ file: 'http/requests/http-request-reading.ts' }),
      expect.objectContaining({ file: 'http/requests/http-policy.ts' }),
    ]);
    expect(filesEnteredAgain(report.http)).toEqual([]);
    expect(report.http.reentries).toBe(0);
  });

  it('one RabbitMQ message goes from the interceptor to its acknowledgement on its channel', () => {
    const { entries } = report.message;
    expect(entries[0]).toMatchObject({ file: 'protocol/idempotency.interceptor.ts' });
    expect(entries.at(-1)).toMatchObject({ file: 'rabbitmq/rabbitmq-delivery.ts', fn: 'RabbitMQDelivery.ack' });
    expect(entries.some(({ fn }) => fn === 'PayoutsConsumer.payout')).toBe(true);
  });
});
