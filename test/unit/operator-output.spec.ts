import { describeRecord } from '../../src/cli/operator-output.js';
import type { OperatorRecord } from '../../src/postgres/index.js';

const NOW = new Date('2026-12-05T12:00:00Z');

/** A record in progress, its lease 90 s ahead and its expiry 3 hours behind `NOW`. */
const record: OperatorRecord = {
  account: '',
  endpoint: 'POST /v1/charges',
  key: 'order-42',
  state: 'running',
  status: 'in_progress',
  attempt: '00000000-0000-4000-8000-000000000000',
  attempts: 1,
  holderTransaction: false,
  awaited: false,
  createdAt: new Date('2026-12-05T11:59:00Z'),
  leaseUntil: new Date('2026-12-05T12:01:30Z'),
  completedAt: null,
  expiresAt: new Date('2026-12-05T09:00:00Z'),
  responseStatus: null,
  bodyBytes: null,
  steps: [],
};

describe("the operator command's record, as a person reads it", () => {
  it('says a time ahead as "in" and one behind as "ago", in the unit that fits', () => {
    const lines = describeRecord(record, NOW).split('\n');
    expect(lines).toContainEqual('lease    until 2026-12-05T12:01:30.000Z (in 90s)');
    expect(lines).toContainEqual('expires  2026-12-05T09:00:00.000Z (3h ago)');
    const lapsed = describeRecord({ ...record, leaseUntil: new Date('2026-12-05T11:50:00Z') }, NOW).split('\n');
    expect(lapsed).toContainEqual('lease    until 2026-12-05T11:50:00.000Z (10m ago)');
  });

  it("shows an empty account (a single-tenant application's) as empty, and no holder but the lease", () => {
    const lines = describeRecord(record, NOW).split('\n');
    expect(lines).toContainEqual('account  ');
    expect(lines).toContainEqual('holder   none (the lease only)');
  });

  it('shows the names of the steps recorded, in order, and how many; a dash when none', () => {
    expect(describeRecord(record, NOW).split('\n')).toContainEqual('steps    -');
    const lines = describeRecord({ ...record, steps: ['create-charge', 'charge-card'] }, NOW).split('\n');
    expect(lines).toContainEqual('steps    create-charge, charge-card (2)');
    // A name that could be misread in the list is quoted.
    const odd = describeRecord({ ...record, steps: ['a, b', ' c'] }, NOW).split('\n');
    expect(odd).toContainEqual('steps    "a, b", " c" (2)');
  });

  it('shows a long list of steps by its first and last names, the recovery point among them', () => {
    const steps = Array.from({ length: 25 }, (_, index) => `receipt:${index + 1}`);
    const lines = describeRecord({ ...record, steps }, NOW).split('\n');
    expect(lines).toContainEqual(
      'steps    receipt:1, receipt:2, receipt:3, … 19 more …, receipt:23, receipt:24, receipt:25 (25)',
    );
  });
});
