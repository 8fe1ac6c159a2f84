// Shared by the client half and the protocol: pure, no Node-only or Nest imports (the client runs in browsers).

/** JSON with object keys sorted at every depth, so that equal values serialize to equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, nested: unknown) => withSortedKeys(nested));
}

/**
 * A copy of an object with its keys sorted, any other value as it is: the step `canonicalJson` takes at every depth,
 * for a `JSON.stringify` replacer that does more in the same pass.
 */
export function withSortedKeys(value: unknown): unknown {
  return value && typeof value === 'object' && !Array.isArray(value)
    ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
    : value;
}
