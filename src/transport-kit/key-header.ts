import { IdempotencyKeyInvalidError } from '../protocol/idempotency.errors.js';
import { keyFault } from '../protocol/scope-values.js';

// The key as a request header carries it, read alike wherever a header carries one: an HTTP route's, and the HTTP
// request that carries a GraphQL operation.

/**
 * Reads an idempotency key from its header value. Accepts a bare token or an RFC 8941 sf-string
 * (`"abc"`, with `\"` and `\\` escapes); either way the key is 1..255 visible ASCII characters.
 * Returns `undefined` when the header is absent; throws `IdempotencyKeyInvalidError` otherwise (an empty header
 * too: a client bug, not a missing key).
 */
export function parseIdempotencyKey(
  headerValue: string | string[] | undefined,
  headerName: string,
): string | undefined {
  if (headerValue === undefined) return undefined;
  // Node.js (under Express and Fastify alike) joins a header sent twice into one value with `, `, which no key
  // holds (no spaces): `a, b`, or `, b` when the first was empty. An empty header alone is a key sent empty.
  if (Array.isArray(headerValue) || headerValue.includes(', ')) {
    throw new IdempotencyKeyInvalidError(
      `${headerName} header`,
      'it was sent more than once (or holds a comma-separated list)',
    );
  }
  const key = headerValue.startsWith('"') ? unquoteStructuredString(headerValue, headerName) : headerValue;
  const fault = keyFault(key);
  if (fault !== undefined) throw new IdempotencyKeyInvalidError(`${headerName} header`, fault);
  return key;
}

function unquoteStructuredString(value: string, headerName: string): string {
  let key = '';
  for (let i = 1; i < value.length; i += 1) {
    const char = value[i];
    if (char === '\\') {
      const escaped = value[i + 1];
      if (escaped !== '"' && escaped !== '\\') {
        throw new IdempotencyKeyInvalidError(`${headerName} header`, 'a quoted key may only escape " and \\');
      }
      key += escaped;
      i += 1;
    } else if (char === '"') {
      if (i !== value.length - 1) {
        throw new IdempotencyKeyInvalidError(`${headerName} header`, 'it has characters after the closing quote');
      }
      return key;
    } else {
      key += char;
    }
  }
  throw new IdempotencyKeyInvalidError(`${headerName} header`, 'its opening quote is never closed');
}
