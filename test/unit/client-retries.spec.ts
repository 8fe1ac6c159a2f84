import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  backoffMs,
  createIdempotencyKey,
  deriveIdempotencyKey,
  idempotentFetch,
  retryAfterMs,
  withRetries,
} from '../../src/client/index.js';

/** A fake clock: sleeping advances it, and every wait is recorded. */
function fakeClock(start = Date.parse('2026-12-02T12:00:00Z')) {
  let now = start;
  const waits: number[] = [];
  return {
    waits,
    now: () => now,
    sleep: async (ms: number) => {
      waits.push(ms);
      now += ms;
    },
  };
}

const answer = (status: number, body: object = {}, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });

/** `send` answering from a script, one entry per attempt; an Error entry is thrown. */
function scripted(...script: Array<Response | Error>) {
  const sent: number[] = [];
  const send = async (attempt: number) => {
    sent.push(attempt);
    const next = script[attempt - 1];
    if (next instanceof Error) throw next;
    return next;
  };
  return { send, sent };
}

describe('backoffMs: full jitter under an exponential ceiling', () => {
  it.each([
    [1, 500],
    [2, 1000],
    [3, 2000],
    [7, 30_000],
    [20, 30_000],
  ])('attempt %i waits below %i ms', (attempt, ceiling) => {
    expect(backoffMs(attempt, { random: () => 0.999999 })).toBe(Math.floor(0.999999 * ceiling));
    expect(backoffMs(attempt, { random: () => 0 })).toBe(0);
    expect(backoffMs(attempt, { random: () => 0.5 })).toBe(ceiling / 2);
  });

  it('follows its options', () => {
    expect(backoffMs(3, { baseDelayMs: 100, maxDelayMs: 250, random: () => 0.5 })).toBe(125);
  });
});

describe('retryAfterMs', () => {
  const now = Date.parse('2026-12-02T12:00:00Z');
  it.each([
    ['2', 2000],
    ['0', 0],
    [' 120 ', 120_000],
    ['Wed, 02 Dec 2026 12:00:05 GMT', 5000],
    ['Wed, 02 Dec 2026 11:59:00 GMT', 0],
  ])('reads %p as %i ms', (header, ms) => {
    expect(retryAfterMs(header, now)).toBe(ms);
  });

  it.each([null, '', 'soon', '-3', '1.5'])('ignores %p', (header) => {
    expect(retryAfterMs(header, now)).toBeUndefined();
  });
});

describe('withRetries', () => {
  it('retries 429, 502, 503, 504 and 409 request_in_progress, then returns the answer', async () => {
    const clock = fakeClock();
    const { send, sent } = scripted(
      answer(429),
      answer(502),
      answer(409, { error: 'request_in_progress' }),
      answer(503),
      answer(201, { id: 'ch_1' }),
    );
    const response = await withRetries(send, { ...clock, random: () => 0.5 });
    expect(response.status).toBe(201);
    expect(sent).toEqual([1, 2, 3, 4, 5]);
    expect(clock.waits).toEqual([250, 500, 1000, 2000]);
  });

  it('honours Retry-After in seconds and as an HTTP date instead of the backoff', async () => {
    const clock = fakeClock();
    // Three seconds after the first wait (of two seconds) has ended.
    const inThreeSeconds = new Date(clock.now() + 2000 + 3000).toUTCString();
    const { send } = scripted(
      answer(503, {}, { 'retry-after': '2' }),
      answer(429, {}, { 'retry-after': inThreeSeconds }),
      answer(200),
    );
    await withRetries(send, { ...clock, random: () => 0.5 });
    expect(clock.waits).toEqual([2000, 3000]);
  });

  it.each([
    [400, {}],
    [402, { error: { code: 'card_declined' } }],
    [404, {}],
    [409, { error: 'some_other_conflict' }],
    [422, { error: 'idempotency_key_reuse' }],
    [500, {}],
  ])('never retries %i', async (status, body) => {
    const clock = fakeClock();
    const { send, sent } = scripted(answer(status, body), answer(201));
    const response = await withRetries(send, clock);
    expect(response.status).toBe(status);
    expect(sent).toEqual([1]);
  });

  it('retries network errors, and throws the last one when the attempts run out', async () => {
    const clock = fakeClock();
    // As Node's fetch rejects when the connection is reset.
    const dropped = new TypeError('fetch failed', {
      cause: Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
    });
    const recovered = scripted(dropped, answer(201));
    await expect(withRetries(recovered.send, clock)).resolves.toHaveProperty('status', 201);
    const { send, sent } = scripted(dropped, dropped, dropped);
    await expect(withRetries(send, { ...clock, attempts: 3 })).rejects.toBe(dropped);
    expect(sent).toEqual([1, 2, 3]);
  });

  it.each(['Failed to fetch', 'NetworkError when attempting to fetch resource.', 'Load failed'])(
    "retries a browser's network error, which has no cause: %p",
    async (message) => {
      const { send, sent } = scripted(new TypeError(message), answer(201));
      await expect(withRetries(send, fakeClock())).resolves.toHaveProperty('status', 201);
      expect(sent).toEqual([1, 2]);
    },
  );

  it('throws any other error at once', async () => {
    const clock = fakeClock();
    const mistake = new TypeError('fetch failed', { cause: new Error('unknown scheme') });
    const { send, sent } = scripted(mistake, answer(201));
    await expect(withRetries(send, clock)).rejects.toBe(mistake);
    expect(sent).toEqual([1]);
    expect(clock.waits).toEqual([]);
  });

  it('returns the last retryable answer after the last attempt', async () => {
    const { send, sent } = scripted(answer(503), answer(503));
    const response = await withRetries(send, { ...fakeClock(), attempts: 2 });
    expect(response.status).toBe(503);
    expect(sent).toEqual([1, 2]);
  });

  it('does not start a wait that would end past the deadline', async () => {
    const clock = fakeClock();
    const { send, sent } = scripted(
      answer(503, {}, { 'retry-after': '1' }),
      answer(503, {}, { 'retry-after': '5' }),
      answer(201),
    );
    const response = await withRetries(send, { ...clock, deadlineMs: 4000 });
    expect(response.status).toBe(503);
    expect(sent).toEqual([1, 2]);
    expect(clock.waits).toEqual([1000]);
  });

  it('stops when its signal is aborted, during a wait or before an attempt', async () => {
    const controller = new AbortController();
    const { send, sent } = scripted(answer(503, {}, { 'retry-after': '60' }), answer(201));
    const pending = withRetries(send, { signal: controller.signal });
    controller.abort(new Error('user cancelled'));
    await expect(pending).rejects.toThrow('user cancelled');
    expect(sent).toEqual([1]);
    await expect(withRetries(send, { signal: controller.signal })).rejects.toThrow('user cancelled');
  });

  it('tells onRetry why and how long it waits', async () => {
    const retries: unknown[] = [];
    const { send } = scripted(answer(429, {}, { 'retry-after': '1' }), answer(200));
    await withRetries(send, { ...fakeClock(), onRetry: (retry) => retries.push(retry) });
    expect(retries).toEqual([{ attempt: 1, delayMs: 1000, reason: 'status 429' }]);
  });
});

describe('idempotentFetch', () => {
  it('sends one key on every attempt and reports a replay', async () => {
    const keys: Array<string | null> = [];
    const fakeFetch = (async (_input: unknown, init?: RequestInit) => {
      keys.push(new Headers(init?.headers).get('Idempotency-Key'));
      if (keys.length === 1) throw new TypeError('Failed to fetch'); // as Chromium's fetch rejects on a lost connection
      return answer(201, { id: 'ch_1' }, { 'idempotent-replay': 'true' });
    }) as typeof fetch;
    const result = await idempotentFetch('http://api.test/v1/charges', {
      method: 'POST',
      fetch: fakeFetch,
      retry: { ...fakeClock(), random: () => 0 },
    });
    expect(result).toMatchObject({ replayed: true, attempts: 2 });
    expect(keys).toEqual([result.idempotencyKey, result.idempotencyKey]);
  });
});

// Node's own fetch against a real local server: the shapes of its errors decide what is retried.
describe("idempotentFetch on Node's fetch", () => {
  let server: Server;
  let url: string;
  let requests = 0;

  beforeAll(async () => {
    // Closes the connection of every other request without an answer (a response lost on the wire), answers the rest.
    server = createServer((request, response) => {
      requests += 1;
      if (requests % 2 === 1) request.socket.destroy();
      else response.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"ch_1"}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/charges`;
  });

  afterAll(async () => {
    await new Promise((resolve) => server.close(resolve));
  });

  /** A port on which nothing listens: one the system gave a server that has since closed. */
  async function closedPort(): Promise<number> {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    return port;
  }

  it('retries a request whose connection closed without an answer, and gets the answer', async () => {
    const clock = fakeClock();
    const result = await idempotentFetch(url, { method: 'POST', body: '{}', retry: { ...clock, random: () => 0 } });
    expect(result.response.status).toBe(201);
    expect(result.attempts).toBe(2);
  });

  it('retries a refused connection until the attempts run out, then throws what fetch threw', async () => {
    const clock = fakeClock();
    const refused = idempotentFetch(`http://127.0.0.1:${await closedPort()}/v1/charges`, {
      method: 'POST',
      retry: { ...clock, attempts: 3 },
    });
    await expect(refused).rejects.toMatchObject({
      name: 'TypeError',
      message: 'fetch failed',
      cause: { code: 'ECONNREFUSED' },
    });
    expect(clock.waits).toHaveLength(2);
  });

  it.each([
    ['an invalid URL', 'htp:/bad url', {}],
    ['a relative URL', '/v1/charges', {}],
    ['a port fetch refuses to use', 'http://127.0.0.1:1/v1/charges', {}],
    ['an invalid header name', 'http://127.0.0.1/v1/charges', { headers: { 'idempotency key': 'k' } }],
    ['a GET with a body', 'http://127.0.0.1/v1/charges', { method: 'GET', body: '{}' }],
    ['a method fetch does not support', 'http://127.0.0.1/v1/charges', { method: 'CONNECT' }],
  ])('throws the TypeError of %s at once, without a retry', async (_case, input, init) => {
    const clock = fakeClock();
    const retried: unknown[] = [];
    const sending = idempotentFetch(input, { ...init, retry: { ...clock, onRetry: (retry) => retried.push(retry) } });
    await expect(sending).rejects.toHaveProperty('name', 'TypeError'); // of Node's realm, not the test's
    expect(retried).toEqual([]);
    expect(clock.waits).toEqual([]);
  });
});

describe('keys', () => {
  it('creates a new UUIDv4 each time', () => {
    const [a, b] = [createIdempotencyKey(), createIdempotencyKey()];
    expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(a).not.toBe(b);
  });

  it('derives the same key from the same intent, whatever the key order, and another from another', async () => {
    const a = await deriveIdempotencyKey({ order: 42, amount: 1200, items: [{ sku: 'x', qty: 1 }] });
    const b = await deriveIdempotencyKey({ items: [{ qty: 1, sku: 'x' }], amount: 1200, order: 42 });
    expect(a).toBe(b);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
    expect(await deriveIdempotencyKey({ order: 43, amount: 1200, items: [{ sku: 'x', qty: 1 }] })).not.toBe(a);
  });
});
