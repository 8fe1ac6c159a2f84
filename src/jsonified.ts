/** What cannot go through JSON as a value: dropped from objects, `null` in arrays. */
type Unrepresentable = undefined | symbol | ((...args: never[]) => unknown);

/**
 * What a `T` is after `JSON.stringify` and `JSON.parse`, as a stored result is: a `Date` (anything with `toJSON()`)
 * comes back as what `toJSON()` returns, a string; functions, symbols and `undefined` properties are gone; a `Map`
 * or a `Set` is an empty object.
 */
export type Jsonified<T> = T extends { toJSON(...args: never[]): infer R }
  ? Jsonified<R>
  : T extends string | number | boolean | null
    ? T
    : T extends Unrepresentable | bigint
      ? never
      : T extends readonly (infer E)[]
        ? (E extends Unrepresentable ? null : Jsonified<E>)[]
        : T extends Map<unknown, unknown> | Set<unknown>
          ? Record<string, never>
          : { [K in keyof T as T[K] extends Unrepresentable ? never : K]: Jsonified<T[K]> };
