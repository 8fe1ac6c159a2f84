/**
 * What a block's `beforeAll` makes and its `afterAll` closes, usable in the block's tests and hooks as the value
 * itself: `make` runs in a `beforeAll` registered here, `close` in an `afterAll` (not when `make` failed).
 * Hooks of one block run in the order they are declared, so what is declared first is made first.
 */
export function madeBeforeAll<T extends object>(make: () => Promise<T>, close: (made: T) => unknown): T {
  let made: T | undefined;
  beforeAll(async () => {
    made = await make();
  });
  afterAll(async () => {
    if (made !== undefined) await close(made);
  });
  return new Proxy({} as T, {
    get(_target, property) {
      if (made === undefined) throw new Error(`read ${String(property)} before the beforeAll that makes it has run`);
      const value: unknown = Reflect.get(made, property, made);
      return typeof value === 'function' ? value.bind(made) : value;
    },
  });
}
