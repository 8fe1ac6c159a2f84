import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Controller, Post } from '@nestjs/common';
import { Idempotent } from '../../src/index.js';
import { PLATFORMS, type Platform } from '../support/platforms.js';
import { createTestDatabase, type TestDatabase } from '../support/test-database.js';
import { startTestApp, type TestApp } from '../support/test-app.js';

// Issue 19: a body over the platform's limit is answered 413, and a Node.js client that is still sending it reads
// that answer (on Fastify it got EPIPE: the connection was closed with the body unread).

/** Express's body parsers refuse bodies over 100 KiB by default; Fastify is given the same limit. */
const BODY_LIMIT = 100 * 1024;

@Controller('oversized')
class OversizedController {
  runs = 0;

  @Post('idempotent')
  @Idempotent()
  idempotent() {
    return { run: (this.runs += 1) };
  }

  @Post('plain')
  plain() {
    return { run: (this.runs += 1) };
  }
}

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db?.drop();
});

/** What a raw TCP client saw: whether an answer came before the body was all sent, and the answer. */
async function sendInTwoParts(url: string, path: string, headers: Record<string, string>) {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  await once(socket, 'connect');
  const received: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => received.push(chunk));
  const closed = new Promise<Error | undefined>((resolve) => {
    socket.once('error', resolve);
    socket.once('close', () => resolve(undefined));
  });
  const body = Buffer.alloc(3 * BODY_LIMIT, 'x');
  const head = [
    `POST ${path} HTTP/1.1`,
    `Host: ${hostname}:${port}`,
    'Content-Type: application/json',
    `Content-Length: ${body.length}`,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ].join('\r\n');
  socket.write(`${head}\r\n\r\n`);
  socket.write(body.subarray(0, BODY_LIMIT / 2));
  // An answer sent without reading the body comes at once; half a second is long enough to see it.
  await Promise.race([once(socket, 'data'), delay(500)]);
  const answeredEarly = received.length > 0;
  const writeError = await new Promise<Error | null | undefined>((resolve) =>
    socket.write(body.subarray(BODY_LIMIT / 2), resolve),
  );
  await Promise.race([closed, once(socket, 'data').then(() => delay(200))]);
  socket.destroy();
  return { answeredEarly, writeError: writeError ?? undefined, answer: Buffer.concat(received).toString('latin1') };
}

/**
 * Sends a request head declaring `declaredLength` bytes and only `sentLength` of them, then waits (at most 15 s) for
 * the answer without sending more: what a client that stalls, or declares a huge body, is answered.
 */
async function sendPartOnly(url: string, path: string, declaredLength: number, sentLength: number) {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port) });
  await once(socket, 'connect');
  try {
    const head = [
      `POST ${path} HTTP/1.1`,
      `Host: ${hostname}:${port}`,
      'Content-Type: application/json',
      `Content-Length: ${declaredLength}`,
      `Idempotency-Key: ${randomUUID()}`,
    ].join('\r\n');
    socket.write(`${head}\r\n\r\n`);
    socket.write(Buffer.alloc(sentLength, 'x'));
    const answer = await Promise.race([once(socket, 'data').then(([chunk]) => String(chunk)), delay(15_000, '')]);
    return answer;
  } finally {
    socket.destroy();
  }
}

/** POSTs `size` bytes with Node's http client in one write, and resolves with the status it read (or its error). */
function postWithNodeHttp(url: string, size: number, key: string): Promise<number | string> {
  return new Promise((resolve) => {
    const body = Buffer.alloc(size, 'x');
    const sent = httpRequest(
      url,
      {
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': body.length, 'idempotency-key': key },
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      },
    );
    sent.on('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
    sent.end(body);
  });
}

async function postWithFetch(url: string, size: number, key: string): Promise<number | string> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: Buffer.alloc(size, 'x'),
    });
    await response.arrayBuffer();
    return response.status;
  } catch (error) {
    const cause = (error as { cause?: NodeJS.ErrnoException }).cause;
    return cause?.code ?? String(error);
  }
}

describe.each(PLATFORMS)('on %s, a body over the limit', (platform: Platform) => {
  let started: TestApp;
  let controller: OversizedController;

  beforeAll(async () => {
    started = await startTestApp({
      platform,
      database: db,
      idempotency: { singleTenant: true },
      controllers: [OversizedController],
      fastify: { bodyLimit: BODY_LIMIT },
    });
    controller = started.app.get(OversizedController);
  });

  afterAll(async () => {
    await started?.close();
  });

  it.each(['idempotent', 'plain'])(
    'sent with a key to the %s route is read to its end before the 413, so that its client can send all of it',
    async (route) => {
      const { answeredEarly, writeError, answer } = await sendInTwoParts(started.url, `/oversized/${route}`, {
        'Idempotency-Key': randomUUID(),
      });
      expect(answeredEarly).toBe(false);
      expect(writeError).toBeUndefined();
      expect(answer).toMatch(/^HTTP\/1\.1 413 /);
      expect(controller.runs).toBe(0);
    },
  );

  it("is answered 413 to Node's http client and to fetch, each sending it in one go", async () => {
    const url = `${started.url}/oversized/idempotent`;
    const statuses: Array<number | string> = [];
    for (let i = 0; i < 5; i += 1) {
      statuses.push(await postWithNodeHttp(url, 8 * 1024 * 1024, randomUUID()));
      statuses.push(await postWithFetch(url, 8 * 1024 * 1024, randomUUID()));
    }
    expect(statuses).toEqual(Array(10).fill(413));
    await expect(
      db.query('SELECT 1 FROM idempotency_records WHERE endpoint = $1', ['POST /oversized/idempotent']),
    ).resolves.toHaveLength(0);
    expect(controller.runs).toBe(0);
  });
});

// The read of a refused body is bounded (src/http/platforms/fastify-platform.ts): any client may send the key header.
describe('on fastify, the read of a body over the limit', () => {
  let started: TestApp;

  beforeAll(async () => {
    started = await startTestApp({
      platform: 'fastify',
      database: db,
      idempotency: { singleTenant: true },
      controllers: [OversizedController],
      fastify: { bodyLimit: BODY_LIMIT },
    });
  });

  afterAll(async () => {
    await started?.close();
  });

  it('does not begin for a body that declares more than 16 MiB: the 413 goes out at once', async () => {
    const answer = await sendPartOnly(started.url, '/oversized/idempotent', 64 * 1024 * 1024, 1024);
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
  });

  it('stops waiting for a client that stalls: the 413 goes out after at most 5 s', async () => {
    const answer = await sendPartOnly(started.url, '/oversized/idempotent', 3 * BODY_LIMIT, BODY_LIMIT / 2);
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
  });
});
