// Shared by the client half and the protocol: pure, no Node-only or Nest imports (the client runs in browsers).

/** JSON with object keys sorted at every depth, so that equal values serialize to equal text. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, nested: unknown) =>
    nested && typeof nested === 'object' && !Array.isArray(nested)
      ? Object.fromEntries(Object.entries(nested).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : nested,
  );
}
