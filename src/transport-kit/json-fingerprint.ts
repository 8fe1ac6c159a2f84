import { createHash } from 'node:crypto';
import { canonicalJson } from '../shared/canonical-json.js';

/** The fingerprint of a call's JSON input (a message's payload, a mutation's arguments): equal values, equal prints. */
export function jsonFingerprint(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}
