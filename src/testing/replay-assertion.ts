import assert from 'node:assert/strict';

/** An answer as supertest gives it: its headers by lower-case name, its body as text (or a `Buffer` for bytes). */
export interface SupertestAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text?: string;
  body?: unknown;
}

/** An answer as `fetch()` gives it. Its body is read from a clone: the test can still read it. */
export interface FetchAnswer {
  status: number;
  headers: { get(name: string): string | null };
  clone(): { arrayBuffer(): Promise<ArrayBuffer> };
}

export type HttpAnswer = SupertestAnswer | FetchAnswer;

export interface ReplayAssertionOptions {
  /** The header that marks a replay: the module's `replayHeaderName`. Default: `Idempotent-Replay`. */
  replayHeader?: string;
}

/**
 * Sends the request `send` makes twice (it must make the same request, key included, at each call): asserts that
 * the first answer is not a replay, and that the second is one (the replay header is `true`) with the first's
 * status, `Content-Type` and body, byte for byte. Resolves with both answers. Assertions are `node:assert`'s, so
 * any test runner reports them.
 *
 * ```ts
 * const send = () => request(app.getHttpServer()).post('/v1/charges').set('Idempotency-Key', 'order-42').send(charge);
 * const { first } = await assertReplayed(send);
 * ```
 */
export async function assertReplayed<Answer extends HttpAnswer>(
  send: () => PromiseLike<Answer>,
  options: ReplayAssertionOptions = {},
): Promise<{ first: Answer; replay: Answer }> {
  const replayHeader = options.replayHeader ?? 'Idempotent-Replay';
  const first = await send();
  const firstMark = headerOf(first, replayHeader);
  assert.equal(
    firstMark,
    undefined,
    `The first answer is already a replay (${replayHeader}: ${firstMark}): its key was used before; send a new one.`,
  );
  const replay = await send();
  const mark = headerOf(replay, replayHeader);
  assert.equal(
    mark,
    'true',
    `The second answer (${replay.status}) is not a replay (${replayHeader}: ${mark ?? 'absent'}): the first ` +
      `answer (${first.status}) was not stored. Only routes marked @Idempotent() store their answers; by default ` +
      'a 5xx, 400, 408, 425 or 429 releases the key (isFinalStatus), and a streamed response or a body over ' +
      'maxStoredBodyBytes is not stored.',
  );
  assert.equal(replay.status, first.status, 'The replay has another status than the first answer.');
  assert.equal(
    headerOf(replay, 'content-type'),
    headerOf(first, 'content-type'),
    'The replay has another Content-Type than the first answer.',
  );
  assert.deepEqual(await bytesOf(replay), await bytesOf(first), 'The replay has another body than the first answer.');
  return { first, replay };
}

const isFetchAnswer = (answer: HttpAnswer): answer is FetchAnswer =>
  typeof (answer.headers as Partial<FetchAnswer['headers']>).get === 'function';

function headerOf(answer: HttpAnswer, name: string): string | undefined {
  if (isFetchAnswer(answer)) return answer.headers.get(name) ?? undefined;
  const value = answer.headers[name.toLowerCase()];
  return Array.isArray(value) ? value.join(', ') : value;
}

async function bytesOf(answer: HttpAnswer): Promise<Buffer> {
  if (isFetchAnswer(answer)) return Buffer.from(await answer.clone().arrayBuffer());
  if (typeof answer.text === 'string') return Buffer.from(answer.text);
  return Buffer.isBuffer(answer.body) ? answer.body : Buffer.from(JSON.stringify(answer.body ?? null));
}
