import { HeldRecords } from '../../src/postgres/held-records.js';

// The records a batch found held by another transaction, whose claims are refused at once for a moment (1 s).

function heldRecordsAt(start = 1_000) {
  const clock = { now: start };
  return { held: new HeldRecords(() => clock.now), clock };
}

it('holds a record found held for a second, then lets its claims go to the database again', () => {
  const { held, clock } = heldRecordsAt();
  held.remember(['a']);
  expect([held.holds('a'), held.holds('b')]).toEqual([true, false]);
  clock.now += 999;
  expect(held.holds('a')).toBe(true);
  clock.now += 1;
  expect(held.holds('a')).toBe(false);
});

it('counts a second from when a record was last found held', () => {
  const { held, clock } = heldRecordsAt();
  held.remember(['a']);
  clock.now += 800;
  held.remember(['a']);
  clock.now += 800;
  expect(held.holds('a')).toBe(true);
});

it('keeps at most 10,000 records, forgetting those found held longest ago first', () => {
  const { held } = heldRecordsAt();
  held.remember(Array.from({ length: 10_001 }, (_, index) => `k${index}`));
  expect([held.holds('k0'), held.holds('k1'), held.holds('k10000')]).toEqual([false, true, true]);
});
