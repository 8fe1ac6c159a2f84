// What the parts of a scope may be, for every transport and `execute()` alike. A value the records table cannot hold
// as it is would either fail every claim as if the database were down (a 503, retried for ever) or be stored as
// another value, sharing that value's records.

const MAX_KEY_LENGTH = 255; // the records table's idempotency_key is varchar(255)
/**
 * The most bytes of an account, and of an endpoint: the records table's unique index holds an entry of about 2,700
 * bytes at most, and one of two such parts with a key of 255 stays within it. A longer one fails its insert, for ever.
 */
export const MAX_SCOPE_TEXT_BYTES = 1000;
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;
const LONE_SURROGATE = /\p{Surrogate}/u; // a surrogate pair is one code point, not a surrogate

/** Why a key cannot be used, or `undefined`: a key is 1..255 visible ASCII characters (no spaces). */
export function keyFault(key: string): string | undefined {
  if (key.length === 0) return 'it is empty';
  if (key.length > MAX_KEY_LENGTH) return `it is longer than ${MAX_KEY_LENGTH} characters`;
  if (!VISIBLE_ASCII.test(key)) return 'it may only hold visible ASCII characters (no spaces)';
  return undefined;
}

/**
 * Why an account, an endpoint or an operation's name cannot be used, or `undefined`: it is text the records table
 * holds as it is, non-empty, of `MAX_SCOPE_TEXT_BYTES` bytes at most (in UTF-8), without a NUL character (which a
 * database's text refuses) or a lone surrogate (which would be stored as U+FFFD).
 */
export function scopeTextFault(text: string): string | undefined {
  if (text.length === 0) return 'it is empty';
  if (Buffer.byteLength(text) > MAX_SCOPE_TEXT_BYTES) return `it is longer than ${MAX_SCOPE_TEXT_BYTES} bytes`;
  if (text.includes('\0')) return 'it holds a NUL character';
  if (LONE_SURROGATE.test(text)) return 'it holds a lone surrogate (not well-formed Unicode)';
  return undefined;
}
