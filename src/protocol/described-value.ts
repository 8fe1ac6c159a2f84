/**
 * A value for a message, with its type: `3600` and `"3600"` (a setting read from the environment) print alike,
 * and the difference is usually the mistake.
 */
export function describedValue(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'string') return `the string ${JSON.stringify(value)}`;
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- a number, boolean, bigint or symbol by now
  return `the ${typeof value} ${String(value)}`;
}
