import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import type { IdempotencyScope } from './idempotency-store.interface.js';

/**
 * The AES-256-GCM envelope of a stored outcome: `version (1 byte) | key id length (1 byte) | key id (UTF-8) |
 * IV (12 bytes) | tag (16 bytes) | ciphertext`. The additional authenticated data binds it to its record's scope and
 * to its own version and key id, so that an envelope copied onto another key's record does not open.
 */
export const ENVELOPE_VERSION = 1;
const IV_BYTES = 12;
const TAG_BYTES = 16;
export const KEY_BYTES = 32;

/** A key of the ring: its id (named by each envelope it seals) and its 32 bytes. */
export interface OutcomeKey {
  id: string;
  key: Buffer;
}

/** Why an envelope does not open, in a sentence naming the key id or the failure, never the content. */
export class EnvelopeUnreadableError extends Error {
  constructor(readonly reason: string) {
    super(reason);
    this.name = new.target.name;
  }
}

/** Seals `plaintext` with `key` (the ring's newest), for the record of `scope`. */
export function sealEnvelope(plaintext: Buffer, key: OutcomeKey, scope: IdempotencyScope): Buffer {
  const keyId = Buffer.from(key.id, 'utf8');
  const iv = randomBytes(IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', key.key, iv, { authTagLength: TAG_BYTES });
  cipher.setAAD(additionalData(ENVELOPE_VERSION, keyId, scope));
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  const header = Buffer.from([ENVELOPE_VERSION, keyId.length]);
  return Buffer.concat([header, keyId, iv, cipher.getAuthTag(), ciphertext]);
}

/** Opens an envelope of the record of `scope` with the key it names; throws `EnvelopeUnreadableError` saying why not. */
export function openEnvelope(envelope: Buffer, keys: ReadonlyMap<string, Buffer>, scope: IdempotencyScope): Buffer {
  if (envelope.length < 2) throw new EnvelopeUnreadableError('the envelope is truncated (no header)');
  const version = envelope[0];
  if (version !== ENVELOPE_VERSION) {
    throw new EnvelopeUnreadableError(`the envelope's version ${version} is not one this build reads`);
  }
  const keyIdEnd = 2 + envelope[1];
  const tagEnd = keyIdEnd + IV_BYTES + TAG_BYTES;
  if (envelope.length < tagEnd) throw new EnvelopeUnreadableError('the envelope is truncated');
  const keyIdBytes = envelope.subarray(2, keyIdEnd);
  const keyId = keyIdBytes.toString('utf8');
  const key = keys.get(keyId);
  if (!key) {
    throw new EnvelopeUnreadableError(`it was sealed with key ${JSON.stringify(keyId)}, which is not in the key ring`);
  }
  const decipher = createDecipheriv('aes-256-gcm', key, envelope.subarray(keyIdEnd, keyIdEnd + IV_BYTES), {
    authTagLength: TAG_BYTES,
  });
  decipher.setAAD(additionalData(version, keyIdBytes, scope));
  decipher.setAuthTag(envelope.subarray(keyIdEnd + IV_BYTES, tagEnd));
  try {
    return Buffer.concat([decipher.update(envelope.subarray(tagEnd)), decipher.final()]);
  } catch {
    throw new EnvelopeUnreadableError(
      `its authentication failed with key ${JSON.stringify(keyId)} (altered, truncated, or copied from another record)`,
    );
  }
}

/** The version, key id and scope, each part length-prefixed (4 bytes), so that no two different ones encode alike. */
function additionalData(version: number, keyId: Buffer, { account, endpoint, key }: IdempotencyScope): Buffer {
  const parts = [keyId, ...[account, endpoint, key].map((part) => Buffer.from(part, 'utf8'))];
  return Buffer.concat([Buffer.from([version]), ...parts.flatMap((part) => [lengthOf(part), part])]);
}

function lengthOf(part: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(part.length);
  return length;
}
