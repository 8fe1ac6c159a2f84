import type { ExecuteResult, Jsonified } from '../../src/index.js';

/** True when A and B are the same type (not merely assignable either way). */
type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;

// Review of issue #10: `execute()` stores `JSON.stringify(result ?? null)`, so work that returns `undefined`
// (`items.find(...)`, a `Map.get()`, a function that returns nothing on one path) gives back `null`; the type said
// `never` (or dropped the `undefined` branch), so `result.id` compiled and threw at run time.
describe('Jsonified, the type of a stored result', () => {
  it('types a result that may be undefined as possibly null, as execute() stores it', () => {
    const maybe: Equals<ExecuteResult<{ id: number } | undefined>['result'], { id: number } | null> = true;
    const nothing: Equals<ExecuteResult<undefined>['result'], null> = true;
    expect([maybe, nothing]).toEqual([true, true]);
  });

  it('keeps what the JSON round trip keeps', () => {
    const date: Equals<Jsonified<{ at: Date }>, { at: string }> = true;
    const optional: Equals<Jsonified<{ id: string; note: string | undefined }>, { id: string; note?: string }> = true;
    const dropped: Equals<Jsonified<{ id: string; log: () => void }>, { id: string }> = true;
    const holes: Equals<Jsonified<(number | undefined)[]>, (number | null)[]> = true;
    const nothing: Equals<ExecuteResult<void>['result'], null> = true;
    expect([date, optional, dropped, holes, nothing]).toEqual([true, true, true, true, true]);
  });
});
