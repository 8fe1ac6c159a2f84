import { assertFaithfulJson } from '../../src/protocol/json-input.js';

class Money {
  constructor(readonly amount: number) {}
}

describe('assertFaithfulJson', () => {
  it('lets plain objects, arrays, strings, finite numbers, booleans and null through', () => {
    const shared = { id: 1 };
    const value = {
      a: [1, 'two', true, null, { b: -0.5 }],
      c: Object.assign(Object.create(null), { d: 'e' }),
      x: shared,
      y: [shared],
    };
    expect(() => assertFaithfulJson(value, 'input')).not.toThrow();
    expect(() => assertFaithfulJson(null, 'input')).not.toThrow();
  });

  it.each([
    ['a Map', { items: [1, 2, new Map([['a', 1]])] }, 'input.items[2] is a Map', /convert it first/],
    ['a Set', { tags: new Set(['a']) }, 'input.tags is a Set', /a Set to an array/],
    ['a Date', { when: new Date(0) }, 'input.when is a Date', /a Date to its ISO string/],
    ['a class instance', { price: new Money(5) }, 'input.price is a Money', /not a plain object or array/],
    [
      'an Array subclass',
      { list: new (class Items extends Array {})() },
      'input.list is a Items',
      /not a plain object/,
    ],
    ['undefined as a property value', { a: { b: undefined } }, 'input.a.b is undefined', /JSON cannot represent/],
    [
      'undefined as an array element',
      { items: [1, undefined] },
      'input.items[1] is undefined',
      /JSON cannot represent/,
    ],
    // eslint-disable-next-line no-sparse-arrays -- the hole is the input under test
    ['a hole in a sparse array', { items: [1, , 3] }, 'input.items[1] is a hole', /sparse array/],
    ['a function', { run: () => 1 }, 'input.run is a function', /JSON cannot represent/],
    ['a symbol', { kind: Symbol('k') }, 'input.kind is a symbol', /JSON cannot represent/],
    ['a symbol key', { [Symbol('k')]: 1 }, 'input has symbol keys', /JSON drops/],
    ['a bigint', { amount: 10n }, 'input.amount is a bigint', /JSON cannot represent/],
    ['NaN', { amount: Number.NaN }, 'input.amount is NaN', /JSON cannot represent/],
    ['Infinity', { 'odd key': [Number.POSITIVE_INFINITY] }, 'input["odd key"][0] is Infinity', /JSON cannot represent/],
  ])('refuses %s, naming its path', (_case, value, start, reason) => {
    expect(() => assertFaithfulJson(value, 'input')).toThrow(TypeError);
    expect(() => assertFaithfulJson(value, 'input')).toThrow(start);
    expect(() => assertFaithfulJson(value, 'input')).toThrow(reason);
  });

  it('refuses a cycle instead of recursing forever', () => {
    const loop: Record<string, unknown> = { a: 1 };
    loop.self = { back: loop };
    expect(() => assertFaithfulJson(loop, 'input')).toThrow(
      'input.self.back refers back to an object that contains it',
    );
  });
});
