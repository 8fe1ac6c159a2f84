/** What cannot go through JSON as a value: dropped from objects, `null` in arrays. */
type Unrepresentable = undefined | void | symbol | ((...args: never[]) => unknown);

/** One object type out of an intersection, so that types read (and compare) as the object they describe. */
type Flattened<T> = { [K in keyof T]: T[K] };

/**
 * A JSON object: a property that may be `undefined` may be missing (JSON drops it); one that is never representable
 * is gone.
 */
type JsonifiedObject<T> = Flattened<
  { [K in keyof T as undefined extends T[K] ? never : T[K] extends Unrepresentable ? never : K]: Jsonified<T[K]> } & {
    [
      K in keyof T as undefined extends T[K] ? (Exclude<T[K], undefined> extends Unrepresentable ? never : K) : never
    ]?: Jsonified<Exclude<T[K], undefined>>;
  }
>;

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
          : JsonifiedObject<T>;

/** A stored result: as `Jsonified<T>`, and `null` where the work returned nothing (it is stored as `null`). */
export type JsonResult<T> = undefined extends T ? Jsonified<Exclude<T, undefined | void>> | null : Jsonified<T>;
