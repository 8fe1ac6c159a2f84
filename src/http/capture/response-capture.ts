import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { StoredResponse } from '../../protocol/idempotency-store.interface.js';
import type { HttpResponse } from '../platforms/http-platform.js';
import { CODING_HEADERS, contentCodingsOf, unstorableCoding } from './content-coding.js';
import { type NoOpMethods, silenceMethods } from '../platforms/silenced-methods.js';

/** What was sent: the whole response, or why it could not be stored. */
export type SentResponse = { captured: true; response: StoredResponse } | { captured: false; reason: string };

export interface CaptureOptions {
  /** False when the route is known to write its response itself (SSE, `@Res()` without passthrough). */
  replayable: boolean;
  maxBodyBytes: number;
  storedHeaders: ReadonlySet<string>;
}

/** The captured response, as far as the code that wrote it and the module are concerned. */
export interface ResponseCapture {
  /** Whether its writers have ended it. */
  readonly ended: boolean;
  /**
   * Answers with `response` now instead of whatever the handler writes (or is writing, withheld): for an attempt
   * the module ended itself (a shutdown). Where the handler's head has already left, the connection is cut.
   */
  answer(response: StoredResponse): void;
}

type EndCallback = (error?: Error) => void;

/**
 * Captures the response as it is written to the socket, whoever writes it (the handler's return value,
 * an exception filter, a passthrough `res`), and withholds it until `onEnd` has run: the outcome is durable
 * before the client can see it. The status line and headers are withheld too (`writeHead` only sets them), so
 * that a response whose outcome could not be committed can still be replaced. While it is withheld, the response
 * has ended for its writers: later writes, ends, status and header changes (an exception filter finishing a
 * response that was already written) do not reach the client, as they would not after a real end. `onEnd`
 * may answer with a replacement, sent instead (when the outcome could not be committed); where the head has
 * already gone out (a streamed response), the connection is cut instead, so that the client sees a network
 * error rather than an answer for work that did not stand. A response written in several chunks is a stream:
 * it is not stored. `onEnd` must not reject.
 */
export function captureResponse(
  response: HttpResponse,
  options: CaptureOptions,
  onEnd: (sent: SentResponse) => Promise<StoredResponse | undefined>,
): ResponseCapture {
  /* eslint-disable @typescript-eslint/unbound-method -- kept to be put back, and called with .call(res) */
  const res = response.raw;
  const originalWrite = res.write;
  const originalEnd = res.end;
  const originalWriteHead = res.writeHead;
  const originalFlushHeaders = res.flushHeaders;
  /* eslint-enable @typescript-eslint/unbound-method */
  let streamed = false;
  let answered = false;

  const restore = () => {
    res.write = originalWrite;
    res.end = originalEnd;
    res.writeHead = originalWriteHead;
    res.flushHeaders = originalFlushHeaders;
  };
  /**
   * Sends `response` in place of what was written, keeping the headers every response gets (CORS, request ids), not
   * those that describe the body it replaces (its type, length, coding and entity tag).
   */
  const sendInstead = (response: StoredResponse, kept: OutgoingHttpHeaders) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const {
      'content-type': _type,
      'content-length': _length,
      'content-encoding': _coding,
      etag: _etag,
      ...common
    } = kept;
    res.statusMessage = ''; // the standard phrase of the replacement's status, not the handler's
    setStatusAndHeaders(res, {
      status: response.status,
      headers: { ...common, ...response.headers, ...lengthHeaderOf(response) },
    });
    (originalEnd as (chunk: Buffer) => ServerResponse).call(res, response.body);
  };

  res.writeHead = function writeHead(this: ServerResponse, status: number, ...rest: unknown[]) {
    const headers = rest.find((part) => typeof part === 'object' && part !== null) as
      OutgoingHttpHeaders | unknown[] | undefined;
    if (typeof rest[0] === 'string') res.statusMessage = rest[0];
    res.statusCode = status;
    for (const [name, value] of headerEntries(headers)) res.setHeader(name, value);
    return res;
  };

  res.write = function write(this: ServerResponse, ...args: unknown[]) {
    streamed = true;
    res.writeHead = originalWriteHead; // a stream's head goes out with its first chunk (Node calls writeHead itself)
    return (originalWrite as (...a: unknown[]) => boolean).apply(this, args);
  } as ServerResponse['write'];

  // Flushing the head starts a stream (long polling, progress): it goes out now, and the response is not stored.
  res.flushHeaders = function flushHeaders(this: ServerResponse) {
    streamed = true;
    res.writeHead = originalWriteHead;
    originalFlushHeaders.call(this);
  };

  res.end = function end(this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
    silenceWrites(response);
    capture.ended = true;
    if (typeof chunk === 'function') [callback, chunk] = [chunk, undefined];
    if (typeof encoding === 'function') [callback, encoding] = [encoding, undefined];
    // One copy of the headers for both: what is stored, and what is sent once the outcome is.
    const withheld = { status: res.statusCode, headers: res.getHeaders() };
    const sent = describeSent(withheld, options, streamed, chunk, encoding as BufferEncoding | undefined);
    void onEnd(sent).then((replacement) => {
      if (answered) return;
      answered = true;
      restore();
      try {
        if (replacement) sendInstead(replacement, withheld.headers);
        else {
          if (!res.headersSent) setStatusAndHeaders(res, withheld);
          originalEnd.call(res, chunk as Buffer, encoding as BufferEncoding, callback as EndCallback | undefined);
        }
      } catch (error) {
        res.destroy(error as Error);
      }
      sealHeaders(res);
    });
    return res;
  } as ServerResponse['end'];

  const capture = {
    ended: false,
    answer(replacement: StoredResponse) {
      if (answered) return;
      answered = true;
      capture.ended = true;
      response.syncHeaders();
      const kept = res.getHeaders();
      restore();
      try {
        sendInstead(replacement, kept);
      } catch (error) {
        res.destroy(error as Error);
      }
      silenceWrites(response);
      sealHeaders(res);
    },
  };
  return capture;
}

/** Sends `response` as the whole answer, and ends the response for whoever writes to it next (see `sealHeaders`). */
export function sendSealed(target: HttpResponse, response: StoredResponse): void {
  const res = target.raw;
  res.statusCode = response.status;
  for (const [name, value] of Object.entries({ ...response.headers, ...lengthHeaderOf(response) })) {
    res.setHeader(name, value);
  }
  res.end(response.body);
  silenceWrites(target);
  sealHeaders(res);
}

/**
 * The `Content-Length` of a response sent whole, as the platforms send it: none on a 204 or a 304, which have no body
 * (RFC 9110 forbids it on a 204; on a 304 it would tell the length of a body that is not sent).
 */
function lengthHeaderOf({ status, body }: StoredResponse): { 'content-length'?: string } {
  return status === 204 || status === 304 ? {} : { 'content-length': String(body.length) };
}

/**
 * Whether the response has been answered already, outside Nest's pipeline (Fastify's `handlerTimeout`, a timeout
 * middleware), while the module made its claim: it is ended for whoever writes to it next (see `sealHeaders`).
 */
export function answeredElsewhere(target: HttpResponse): boolean {
  const res = target.raw;
  if (!res.headersSent && !res.writableEnded) return false;
  silenceWrites(target);
  sealHeaders(res);
  return true;
}

/** A response's writes, once it has ended for its writers. */
const RESPONSE_WRITES: NoOpMethods = {
  write: () => false,
  end(this: object) {
    return this;
  },
  writeHead(this: object) {
    return this;
  },
};

/** A response's header changes, once its answer is out. */
const HEADER_CHANGES: NoOpMethods = {
  setHeader(this: object) {
    return this;
  },
  appendHeader(this: object) {
    return this;
  },
  removeHeader: () => undefined,
};

/**
 * Later writes and ends do nothing, as for a response that has ended. The platform's own ways of sending a body
 * (Express's `send` and `json`, Fastify's `reply.send`, through which Nest sends a value) are skipped whole, so that
 * nothing is serialized or hashed for an answer that is not sent.
 */
function silenceWrites(response: HttpResponse): void {
  silenceMethods(response.raw, RESPONSE_WRITES);
  response.silence();
}

/**
 * Once the answer is out, what else is done to the response (by a handler that runs on after a timeout answered
 * for it, or by Nest sending a value that an interceptor outside the module's made of a replay) cannot reach the
 * client; Node would throw on it.
 */
function sealHeaders(res: ServerResponse): void {
  silenceMethods(res, HEADER_CHANGES);
}

/** `writeHead`'s headers: an object, or a flat or paired array of names and values. */
function headerEntries(
  headers: OutgoingHttpHeaders | unknown[] | undefined,
): Array<[string, string | number | string[]]> {
  if (!headers) return [];
  if (!Array.isArray(headers)) {
    return Object.entries(headers).filter(
      (entry): entry is [string, string | number | string[]] => entry[1] !== undefined,
    );
  }
  const pairs: Array<[string, string]> = Array.isArray(headers[0])
    ? (headers as Array<[string, string]>)
    : Array.from({ length: headers.length / 2 }, (_, i) => [String(headers[2 * i]), String(headers[2 * i + 1])]);
  const merged = new Map<string, string[]>();
  for (const [name, value] of pairs)
    merged.set(name.toLowerCase(), [...(merged.get(name.toLowerCase()) ?? []), String(value)]);
  return [...merged].map(([name, values]) => [name, values.length === 1 ? values[0] : values]);
}

function setStatusAndHeaders(
  res: ServerResponse,
  { status, headers }: { status: number; headers: OutgoingHttpHeaders },
) {
  res.statusCode = status;
  for (const name of res.getHeaderNames()) if (!(name in headers)) res.removeHeader(name);
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) res.setHeader(name, value);
}

function describeSent(
  head: { status: number; headers: OutgoingHttpHeaders },
  options: CaptureOptions,
  streamed: boolean,
  chunk: unknown,
  encoding: BufferEncoding | undefined,
): SentResponse {
  if (!options.replayable || streamed) {
    return {
      captured: false,
      reason:
        'the response is streamed, by the handler or by a plugin such as compression, or the handler writes it itself',
    };
  }
  const body = toBuffer(chunk, encoding);
  if (body === undefined) return { captured: false, reason: 'the response body is not bytes or text' };
  if (body.length > options.maxBodyBytes) {
    return { captured: false, reason: `the response body is larger than ${options.maxBodyBytes} bytes` };
  }
  const headers = pickHeaders(head.headers, options.storedHeaders);
  // A coded body (a compression plugin's) is stored as it was sent, with its coding, if every replay can be read.
  const codings = contentCodingsOf(head.headers['content-encoding']);
  if (codings.length > 0) {
    const reason = unstorableCoding(body, codings, options.maxBodyBytes);
    if (reason !== undefined) return { captured: false, reason };
    Object.assign(headers, pickHeaders(head.headers, CODING_HEADERS));
  }
  return { captured: true, response: { status: head.status, headers, body } };
}

function toBuffer(chunk: unknown, encoding: BufferEncoding | undefined): Buffer | undefined {
  if (chunk === undefined || chunk === null) return Buffer.alloc(0);
  if (typeof chunk === 'string')
    return Buffer.isEncoding(encoding ?? 'utf8') ? Buffer.from(chunk, encoding ?? 'utf8') : undefined;
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  return undefined;
}

/** The headers of a response that are stored with it: the allowed ones, in their stored form. */
export function pickHeaders(
  headers: OutgoingHttpHeaders,
  allowed: ReadonlySet<string>,
): Record<string, string | string[]> {
  const picked: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || !allowed.has(name)) continue;
    picked[name] = Array.isArray(value) ? value : String(value);
  }
  return picked;
}
