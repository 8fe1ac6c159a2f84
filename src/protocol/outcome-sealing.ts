import { describedValue } from './described-value.js';
import type { OutcomeEncryptionOptions } from './idempotency-options.interface.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';
import type { IdempotencyScope, StoredResponse } from './idempotency-store.interface.js';
import { boolean } from './option-checks.js';
import { EnvelopeUnreadableError, KEY_BYTES, type OutcomeKey, openEnvelope, sealEnvelope } from './outcome-envelope.js';

/**
 * The header a sealed record's headers hold instead of the response's: it begins with a colon, which no
 * transport's header name holds, so no outcome stored in plaintext has it.
 */
export const ENVELOPE_HEADER = ':nest-idempotency-envelope';
const ENVELOPE_HEADER_VALUE = 'aes-256-gcm';
/** What a sealed step result begins with: no JSON text begins with a letter other than t, f or n. */
const SEALED_STEP_PREFIX = 'aes-256-gcm:';
/** The sealed copy of the status, before the headers' length. */
const STATUS_BYTES = 2;

/**
 * What of an outcome the store holds: with encryption, its status in clear and its headers and body sealed in one
 * envelope (as the record's body); without, the outcome as it is. Opening refuses what it cannot read, with a reason:
 * an envelope that does not open, a sealed record without a key ring, a plaintext one while plaintext is refused.
 */
export class OutcomeSealing {
  private constructor(
    private readonly newest: OutcomeKey | undefined,
    private readonly keys: ReadonlyMap<string, Buffer>,
    private readonly acceptPlaintext: boolean,
  ) {}

  /** From the module's `encryption` option, checked: refused at start-up with the fix named. */
  static from(encryption: OutcomeEncryptionOptions | undefined): OutcomeSealing {
    if (encryption === undefined) return new OutcomeSealing(undefined, new Map(), true);
    const ring = checkedRing(encryption.keys);
    const acceptPlaintext = boolean('encryption.acceptPlaintext', encryption.acceptPlaintext ?? false);
    return new OutcomeSealing(ring[0], new Map(ring.map(({ id, key }) => [id, key])), acceptPlaintext);
  }

  seal(scope: IdempotencyScope, response: StoredResponse): StoredResponse {
    if (!this.newest) return response;
    const headers = Buffer.from(JSON.stringify(response.headers), 'utf8');
    // The status is sealed too (and compared with the record's on opening): it stays readable in its column, but
    // a status rewritten there (a declined charge made 200) is refused like any other altered byte.
    const prefix = Buffer.alloc(STATUS_BYTES + 4);
    prefix.writeUInt16BE(response.status);
    prefix.writeUInt32BE(headers.length, STATUS_BYTES);
    const envelope = sealEnvelope(Buffer.concat([prefix, headers, response.body]), this.newest, scope);
    return { status: response.status, headers: { [ENVELOPE_HEADER]: ENVELOPE_HEADER_VALUE }, body: envelope };
  }

  /**
   * A step's result (its JSON text) as the store holds it: sealed, and bound to its scope and its step's name (a
   * result moved to another step does not open), when outcomes are sealed.
   */
  sealStep(scope: IdempotencyScope, name: string, json: string): string {
    if (!this.newest) return json;
    const envelope = sealEnvelope(Buffer.from(json, 'utf8'), this.newest, stepScope(scope, name));
    return SEALED_STEP_PREFIX + envelope.toString('base64');
  }

  /** A step's result as it was given (JSON text); throws `EnvelopeUnreadableError` as `open` does. */
  openStep(scope: IdempotencyScope, name: string, stored: string): string {
    if (!stored.startsWith(SEALED_STEP_PREFIX)) {
      if (this.acceptPlaintext) return stored;
      throw new EnvelopeUnreadableError('it is stored in plaintext, and encryption.acceptPlaintext is off');
    }
    if (!this.newest) {
      throw new EnvelopeUnreadableError('it is encrypted, and the module was given no encryption key ring');
    }
    const envelope = Buffer.from(stored.slice(SEALED_STEP_PREFIX.length), 'base64');
    return openEnvelope(envelope, this.keys, stepScope(scope, name)).toString('utf8');
  }

  /** The outcome as it was stored for `scope`; throws `EnvelopeUnreadableError` saying why it cannot be read. */
  open(scope: IdempotencyScope, stored: StoredResponse): StoredResponse {
    if (stored.headers[ENVELOPE_HEADER] === undefined) {
      if (this.acceptPlaintext) return stored;
      throw new EnvelopeUnreadableError(
        'it is stored in plaintext, and encryption.acceptPlaintext is off (it was stored before encryption was on, or written by hand)',
      );
    }
    if (!this.newest) {
      throw new EnvelopeUnreadableError('it is encrypted, and the module was given no encryption key ring');
    }
    const plaintext = openEnvelope(stored.body, this.keys, scope);
    const headersStart = STATUS_BYTES + 4;
    const headersEnd =
      headersStart + (plaintext.length >= headersStart ? plaintext.readUInt32BE(STATUS_BYTES) : Infinity);
    if (headersEnd > plaintext.length) throw new EnvelopeUnreadableError('its decrypted content is malformed');
    const sealedStatus = plaintext.readUInt16BE(0);
    if (sealedStatus !== stored.status) {
      throw new EnvelopeUnreadableError(
        `its status column says ${stored.status}, and the status sealed with it is ${sealedStatus} (altered)`,
      );
    }
    const headers = JSON.parse(
      plaintext.subarray(headersStart, headersEnd).toString('utf8'),
    ) as StoredResponse['headers'];
    return { status: stored.status, headers, body: plaintext.subarray(headersEnd) };
  }
}

/** What a step's envelope is bound to: its scope and its name (a key holds no line break, so none reads as another). */
function stepScope(scope: IdempotencyScope, name: string): IdempotencyScope {
  return { ...scope, key: `${scope.key}\nstep ${name}` };
}

function checkedRing(keys: OutcomeEncryptionOptions['keys']): OutcomeKey[] {
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new IdempotencySetupError(
      `Idempotency option encryption.keys must be a non-empty array of { id, key } (the newest first), got ${describedValue(keys)}: ` +
        'give at least one 32-byte key, e.g. { id: "2026-12", key: randomBytes(32).toString("base64") }, or drop `encryption`.',
    );
  }
  const seen = new Set<string>();
  return keys.map(({ id, key }, index) => {
    const where = `encryption.keys[${index}]`;
    if (typeof id !== 'string' || id.length === 0 || Buffer.byteLength(id, 'utf8') > 255) {
      throw new IdempotencySetupError(
        `Idempotency option ${where}.id must be a string of 1 to 255 bytes, got ${describedValue(id)}: name each key once, e.g. "2026-12".`,
      );
    }
    if (seen.has(id)) {
      throw new IdempotencySetupError(
        `Idempotency option encryption.keys holds the id ${JSON.stringify(id)} twice: give each key an id of its own.`,
      );
    }
    seen.add(id);
    const bytes = typeof key === 'string' ? Buffer.from(key, 'base64') : key;
    if (!Buffer.isBuffer(bytes) || bytes.length !== KEY_BYTES) {
      throw new IdempotencySetupError(
        `Idempotency option ${where}.key (id ${JSON.stringify(id)}) must be ${KEY_BYTES} bytes (a Buffer, or its base64), ` +
          `got ${Buffer.isBuffer(bytes) ? `${bytes.length} bytes` : describedValue(key)}: make one with randomBytes(32).`,
      );
    }
    return { id, key: Buffer.from(bytes) };
  });
}
