import { canonicalJson } from '../shared/canonical-json.js';

/**
 * A new idempotency key, for an intent the caller keeps (in memory, or persisted with a job row): create it
 * once where the intent is formed and reuse it on every attempt.
 */
export function createIdempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

/**
 * A key derived from the intent itself (a stable SHA-256 of caller-chosen fields, whatever their key order),
 * for callers that must survive a restart without storing a key: the same fields always give the same key.
 */
export async function deriveIdempotencyKey(intent: Record<string, unknown>): Promise<string> {
  const bytes = new TextEncoder().encode(canonicalJson(intent));
  const digest = new Uint8Array(await globalThis.crypto.subtle.digest('SHA-256', bytes));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, '0')).join('');
}
