import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { StoredResponse } from './idempotency-store.interface.js';

/** What was sent: the whole response, or why it could not be stored. */
export type SentResponse = { storable: true; response: StoredResponse } | { storable: false; reason: string };

export interface CaptureOptions {
  /** False when the route is known to write its response itself (SSE, `@Res()` without passthrough). */
  storable: boolean;
  maxBodyBytes: number;
  storedHeaders: ReadonlySet<string>;
}

/** Whether the captured response has ended yet, as far as the code that wrote it is concerned. */
export interface ResponseCapture {
  readonly ended: boolean;
}

type EndCallback = (error?: Error) => void;

/**
 * Captures the response as it is written to the socket, whoever writes it (the handler's return value,
 * an exception filter, a passthrough `res`), and holds it until `onEnd` has run: the outcome is durable
 * before the client can see it. While it is held, the response has ended for its writers: later writes,
 * ends, status and header changes (an exception filter finishing a response that was already written) do
 * not reach the client, as they would not after a real end. `onEnd` may answer with a replacement, sent
 * instead (when the outcome could not be committed). A response written in several chunks is a stream:
 * it is not stored, nor held. `onEnd` must not reject.
 */
export function captureResponse(
  res: ServerResponse,
  options: CaptureOptions,
  onEnd: (sent: SentResponse) => Promise<StoredResponse | undefined>,
): ResponseCapture {
  const originalWrite = res.write;
  const originalEnd = res.end;
  const capture = { ended: false };
  let streamed = false;

  res.write = function write(this: ServerResponse, ...args: unknown[]) {
    streamed = true;
    return (originalWrite as (...a: unknown[]) => boolean).apply(this, args);
  } as ServerResponse['write'];

  res.end = function end(this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
    res.write = (() => false) as ServerResponse['write'];
    res.end = (() => res) as ServerResponse['end'];
    capture.ended = true;
    if (typeof chunk === 'function') [callback, chunk] = [chunk, undefined];
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    const sent = describeSent(res, options, streamed, chunk, encoding as BufferEncoding | undefined);
    const held = { status: res.statusCode, headers: res.getHeaders() };
    void onEnd(sent).then((replacement) => {
      res.write = originalWrite;
      res.end = originalEnd;
      try {
        if (replacement && !res.headersSent) {
          // The replacement keeps the headers every response gets (CORS, request ids), not the body's own.
          const { 'content-type': _type, 'content-length': _length, etag: _etag, ...kept } = held.headers;
          const headers = { ...kept, ...replacement.headers, 'content-length': String(replacement.body.length) };
          setStatusAndHeaders(res, { status: replacement.status, headers });
          [chunk, encoding] = [replacement.body, undefined];
        } else if (!res.headersSent) {
          setStatusAndHeaders(res, held);
        }
        originalEnd.call(res, chunk as Buffer, encoding as BufferEncoding, callback as EndCallback | undefined);
      } catch (error) {
        res.destroy(error as Error);
      }
    });
    return res;
  } as ServerResponse['end'];

  return capture;
}

function setStatusAndHeaders(res: ServerResponse, { status, headers }: { status: number; headers: OutgoingHttpHeaders }) {
  res.statusCode = status;
  for (const name of res.getHeaderNames()) if (!(name in headers)) res.removeHeader(name);
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
}

function describeSent(
  res: ServerResponse,
  options: CaptureOptions,
  streamed: boolean,
  chunk: unknown,
  encoding: BufferEncoding | undefined,
): SentResponse {
  if (!options.storable || streamed) {
    return { storable: false, reason: 'the handler streams its response or writes it itself' };
  }
  const body = toBuffer(chunk, encoding);
  if (body === undefined) return { storable: false, reason: 'the response body is not bytes or text' };
  if (body.length > options.maxBodyBytes) {
    return { storable: false, reason: `the response body is larger than ${options.maxBodyBytes} bytes` };
  }
  return {
    storable: true,
    response: { status: res.statusCode, headers: pickHeaders(res.getHeaders(), options.storedHeaders), body },
  };
}

function toBuffer(chunk: unknown, encoding: BufferEncoding | undefined): Buffer | undefined {
  if (chunk === undefined || chunk === null) return Buffer.alloc(0);
  if (typeof chunk === 'string') return Buffer.isEncoding(encoding ?? 'utf8') ? Buffer.from(chunk, encoding ?? 'utf8') : undefined;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return undefined;
}

function pickHeaders(headers: OutgoingHttpHeaders, allowed: ReadonlySet<string>): Record<string, string | string[]> {
  const picked: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || !allowed.has(name)) continue;
    picked[name] = Array.isArray(value) ? value : String(value);
  }
  return picked;
}
