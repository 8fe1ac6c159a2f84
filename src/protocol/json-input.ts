/**
 * Refuses a value that JSON cannot represent faithfully, naming where it is (`input.items[2]`): JSON turns a
 * Map or a Set into `{}`, drops `undefined`, functions and symbols, writes non-finite numbers as `null` and a Date
 * as whatever its `toJSON` says, so two different values could share one text, and so one fingerprint.
 * Plain objects, arrays, strings, finite numbers, booleans and null pass.
 */
export function assertFaithfulJson(value: unknown, path: string): void {
  check(value, path, new Set());
}

function check(value: unknown, path: string, ancestors: Set<object>): void {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) refuse(path, `is ${value}, which JSON cannot represent`);
    return;
  }
  if (typeof value !== 'object') refuse(path, `is ${describeType(value)}, which JSON cannot represent`);
  if (ancestors.has(value)) refuse(path, 'refers back to an object that contains it');
  ancestors.add(value);
  if (Array.isArray(value) && Object.getPrototypeOf(value) === Array.prototype) {
    for (let index = 0; index < value.length; index += 1) {
      if (!(index in value)) refuse(`${path}[${index}]`, 'is a hole in a sparse array, which JSON writes as null');
      check(value[index], `${path}[${index}]`, ancestors);
    }
  } else if (isPlainObject(value)) {
    if (Object.getOwnPropertySymbols(value).length > 0) refuse(path, 'has symbol keys, which JSON drops');
    for (const [key, nested] of Object.entries(value)) check(nested, `${path}${propertyPath(key)}`, ancestors);
  } else {
    const name = value.constructor?.name ?? 'an object without a plain prototype';
    refuse(
      path,
      `is a ${name}, not a plain object or array: convert it first (a Date to its ISO string, a Map to an object, a Set to an array)`,
    );
  }
  ancestors.delete(value);
}

function isPlainObject(value: object): boolean {
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function describeType(value: unknown): string {
  return value === undefined ? 'undefined' : `a ${typeof value}`;
}

function propertyPath(key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

function refuse(path: string, reason: string): never {
  throw new TypeError(`${path} ${reason}.`);
}
