import * as zlib from 'node:zlib';
import type { StoredResponse } from '../../protocol/idempotency-store.interface.js';

/**
 * The content codings of a stored body (a compression plugin's gzip, say): which ones a client accepts, by its
 * `Accept-Encoding` (RFC 9110, 12.5.3), and their decoding, for a replay to a client that does not accept them.
 */

type Decoder = (body: Buffer, options: { maxOutputLength: number }) => Buffer;

/** zstd, which `@fastify/compress` prefers where Node.js has it: from Node.js 22.15 on (not in Node.js 20's types). */
const zstdDecompressSync = (zlib as { zstdDecompressSync?: Decoder }).zstdDecompressSync;

/** The codings the module can undo, by their name in `Content-Encoding`. */
const DECODERS: ReadonlyMap<string, Decoder> = new Map<string, Decoder>([
  ['gzip', zlib.gunzipSync],
  ['deflate', zlib.inflateSync],
  ['br', zlib.brotliDecompressSync],
  ...(zstdDecompressSync ? [['zstd', zstdDecompressSync] satisfies [string, Decoder]] : []),
]);

/** What is stored with a coded body besides the allowed headers: how it is coded, and that it varies by coding. */
export const CODING_HEADERS: ReadonlySet<string> = new Set(['content-encoding', 'vary']);

/** `x-gzip` is gzip (RFC 9110, 8.4.1.3). */
const codingName = (name: string) => (name === 'x-gzip' ? 'gzip' : name);

/** The codings a `Content-Encoding` names, in the order they were applied; `identity` is none. */
export function contentCodingsOf(contentEncoding: string | string[] | number | undefined): string[] {
  if (contentEncoding === undefined) return [];
  return [contentEncoding]
    .flat()
    .join(',')
    .split(',')
    .map((name) => codingName(name.trim().toLowerCase()))
    .filter((name) => name !== '' && name !== 'identity');
}

/** A qvalue as RFC 9110 (12.4.2) writes it; anything else counts as 0, so that in doubt the client gets identity. */
const QVALUE = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

function weightOf(parameters: string[]): number {
  const q = parameters.find((parameter) => parameter.startsWith('q='));
  if (q === undefined) return 1;
  const value = q.slice(2);
  return QVALUE.test(value) ? Number(value) : 0;
}

/**
 * Whether a client whose `Accept-Encoding` is `acceptEncoding` accepts every one of `codings`: each is listed with a
 * weight above 0, or left to a `*` that has one. Without the header, a client accepts identity only, as compression
 * middlewares assume (RFC 9110 would allow any coding, which a client that sends none may well not read). A coding
 * listed twice counts with its lower weight.
 */
export function acceptsCodings(acceptEncoding: string | undefined, codings: readonly string[]): boolean {
  if (acceptEncoding === undefined) return false;
  const weights = new Map<string, number>();
  for (const entry of acceptEncoding.split(',')) {
    const [name, ...parameters] = entry.split(';').map((part) => part.trim().toLowerCase());
    if (name === '') continue;
    const coding = codingName(name);
    weights.set(coding, Math.min(weights.get(coding) ?? 1, weightOf(parameters)));
  }
  return codings.every((coding) => (weights.get(coding) ?? weights.get('*') ?? 0) > 0);
}

/** Undoes `codings` (applied in that order, so undone in reverse), each step bounded to `maxBytes`; throws otherwise. */
export function decodeBody(body: Buffer, codings: readonly string[], maxBytes: number): Buffer {
  return codings.reduceRight((coded, coding) => {
    const decode = DECODERS.get(coding);
    if (!decode) throw new Error(`the module cannot decode the content coding ${coding}`);
    return decode(coded, { maxOutputLength: maxBytes });
  }, body);
}

/**
 * Why a body in `codings` cannot be stored, or `undefined` when it can: every replay must be readable, so the body
 * must decode, for a client that does not accept its coding, into at most `maxBytes` (`maxStoredBodyBytes`, the bound
 * an uncoded body has, which also bounds what a small coded body may inflate to).
 */
export function unstorableCoding(body: Buffer, codings: readonly string[], maxBytes: number): string | undefined {
  const unknown = codings.find((coding) => !DECODERS.has(coding));
  if (unknown !== undefined) {
    return `its Content-Encoding is ${codings.join(', ')}, which the module cannot decode for a client that does not accept it`;
  }
  try {
    decodeBody(body, codings, maxBytes);
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE'
      ? `decoded, the response body is larger than ${maxBytes} bytes`
      : `its ${codings.join(', ')} body does not decode`;
  }
}

/**
 * The stored response as this client gets it: as stored when it accepts every coding of the body, else decoded, with
 * its own length and no `Content-Encoding`. `undefined` when it does not decode into `maxBytes` (`maxStoredBodyBytes`
 * was lowered since it was stored, which checked it against the bound of that time).
 */
export function responseForClient(
  stored: StoredResponse,
  acceptEncoding: string | undefined,
  maxBytes: number,
): StoredResponse | undefined {
  const codings = contentCodingsOf(stored.headers['content-encoding']);
  if (codings.length === 0 || acceptsCodings(acceptEncoding, codings)) return stored;
  const { 'content-encoding': _coding, ...headers } = stored.headers;
  try {
    return { status: stored.status, headers, body: decodeBody(stored.body, codings, maxBytes) };
  } catch {
    return undefined;
  }
}
