import { randomBytes, randomUUID } from 'node:crypto';
import { Body, Controller, Post, Req } from '@nestjs/common';
import { type Attributes, trace } from '@opentelemetry/api';
import request from 'supertest';
import { Idempotent, IdempotencyService } from '../../src/index.js';
import { GateQueue } from '../support/gate.js';
import type { PlatformRequest as Request } from '../support/platforms.js';
import { useTcpProxy } from '../support/tcp-proxy.js';
import { InMemoryTelemetry, matches, RecordedEvents } from '../support/telemetry.js';
import { useTestDatabase } from '../support/test-database.js';
import { useTestApp } from '../support/test-app.js';
import { waitFor } from '../support/wait-for.js';

const gates = new GateQueue();

/** Each scenario on a route of its own: its counts are its endpoint's. */
@Controller('m')
@Idempotent()
class MeteredController {
  @Post('charge')
  charge(@Body() body: object) {
    return { charged: body };
  }

  @Post('held')
  async held(@Req() req: Request) {
    await gates.pass(req);
    return { held: true };
  }

  @Post('wait')
  @Idempotent({ inFlight: 'wait', inFlightWaitSeconds: 30 })
  async wait(@Req() req: Request) {
    await gates.pass(req);
    return { waited: true };
  }

  @Post('fail')
  fail(): never {
    throw new Error('the handler failed');
  }

  @Post('hung')
  @Idempotent({ maxHoldSeconds: 1 })
  async hung(@Req() req: Request) {
    await gates.pass(req);
    return { hung: true };
  }

  @Post('finalize')
  async finalize(@Req() req: Request) {
    await gates.pass(req);
    return { finalized: true };
  }
}

// Registered before the application is created, as an application registers its SDK.
let telemetry: InMemoryTelemetry;
let recorded: RecordedEvents;
beforeAll(() => {
  telemetry = new InMemoryTelemetry();
  recorded = new RecordedEvents();
});
afterAll(async () => {
  recorded.stop();
  await telemetry.stop();
});

const db = useTestDatabase();
const proxy = useTcpProxy(db);
const server = useTestApp(
  () => ({
    database: { url: proxy.urlFor(db.url) },
    pool: { max: 4, connectionTimeoutMillis: 1000 },
    idempotency: {
      accountResolver: () => 'acct-secret',
      leaseSeconds: 1,
      storeTimeoutSeconds: 2,
      finalizeRetries: 1,
      encryption: { keys: [{ id: 'telemetry', key: randomBytes(32) }] },
    },
    controllers: [MeteredController],
  }),
  () => {
    proxy.bringUp();
    gates.releaseAll();
  },
);

/** Every key the spec uses: none may appear in an attribute. */
const keys: string[] = [];
const newKey = () => {
  const key = randomUUID();
  keys.push(key);
  return key;
};
const post = (path: string, key: string, body: object = {}) =>
  request(server.url).post(path).set('Idempotency-Key', key).send(body);

const http = (path: string): Attributes => ({
  'idempotency.transport': 'http',
  'idempotency.endpoint': `POST /m/${path}`,
});
const outcomes = (path: string, outcome: string) =>
  telemetry.count('idempotency.outcomes', { ...http(path), 'idempotency.outcome': outcome });

/** Sends a request that waits at a gate inside its handler; resolves once it is there. */
async function sendHeld(path: string, key: string) {
  const gate = gates.holdNext();
  const answer = post(path, key).then((response) => response);
  await gate.reached;
  return { gate, answer };
}

it('counts a new call, its stored outcome, its replay from memory and a key reuse, with their spans and durations', async () => {
  const key = newKey();
  await post('/m/charge', key, { amount: 1 }).expect(201);
  await post('/m/charge', key, { amount: 1 }).expect(201);
  await post('/m/charge', key, { amount: 2 }).expect(422);

  await expect(outcomes('charge', 'new')).resolves.toBe(1);
  await expect(outcomes('charge', 'stored')).resolves.toBe(1);
  await expect(outcomes('charge', 'replay.memory')).resolves.toBe(1);
  await expect(outcomes('charge', 'key_reuse')).resolves.toBe(1);

  const handler = (await telemetry.points('idempotency.handler.duration')).filter((point) =>
    matches(point.attributes, http('charge')),
  );
  expect(handler).toEqual([expect.objectContaining({ value: expect.objectContaining({ count: 1 }) })]);
  const storeOperations = (await telemetry.points('idempotency.store.operation.duration')).map(
    (point) => point.attributes['idempotency.store.operation'],
  );
  expect(storeOperations).toEqual(expect.arrayContaining(['claim', 'complete']));
  // The PostgreSQL store's statements, each with the records it carried: one claim and one outcome of one record.
  const batches = await telemetry.points('idempotency.store.batch.size');
  const batchOf = (operation: string) =>
    batches.find((point) => point.attributes['idempotency.store.operation'] === operation)?.value;
  expect(batchOf('claim')).toEqual(expect.objectContaining({ count: 1, sum: 1 }));
  expect(batchOf('complete')).toEqual(expect.objectContaining({ count: 1, sum: 1 }));

  const spans = telemetry.finishedSpans().filter((span) => matches(span.attributes, http('charge')));
  expect(spans.map((span) => [span.name, span.attributes['idempotency.outcome']])).toEqual([
    ['idempotency claim', 'new'],
    ['idempotency run', undefined],
    ['idempotency finalize', undefined],
    ['idempotency claim', 'replay.memory'],
    ['idempotency claim', undefined],
  ]);
  expect(spans[4].attributes['error.type']).toBe('IdempotencyKeyReuseError');
});

it('counts a call refused while its key is in progress (409), and one that waited for the outcome and replayed it from the store', async () => {
  const held = await sendHeld('/m/held', newKey());
  const inProgress = newKey();
  const holding = await sendHeld('/m/held', inProgress);
  await post('/m/held', inProgress).expect(409);
  held.gate.release();
  holding.gate.release();
  await Promise.all([held.answer, holding.answer]);
  await expect(outcomes('held', 'in_progress')).resolves.toBe(1);

  const key = newKey();
  const first = await sendHeld('/m/wait', key);
  const waiter = post('/m/wait', key).then((response) => response);
  await waitFor(async () => ((await outcomes('wait', 'waited')) === 1 ? true : undefined), 'the retry to wait');
  first.gate.release();
  expect((await first.answer).status).toBe(201);
  expect((await waiter).status).toBe(201);
  await expect(outcomes('wait', 'new')).resolves.toBe(1);
  await expect(outcomes('wait', 'replay.store')).resolves.toBe(1);
});

it('counts a failed handler whose claim is released, and times the release as a release', async () => {
  /** How many store operations of each kind were timed so far. */
  const timed = async (operation: string) =>
    (await telemetry.points('idempotency.store.operation.duration'))
      .filter((point) => point.attributes['idempotency.store.operation'] === operation)
      .reduce((sum, point) => sum + (point.value as { count: number }).count, 0);
  const [releasesBefore, completesBefore] = [await timed('release'), await timed('complete')];
  await post('/m/fail', newKey()).expect(500);
  await expect(outcomes('fail', 'new')).resolves.toBe(1);
  await expect(outcomes('fail', 'released')).resolves.toBe(1);
  expect(await timed('release')).toBe(releasesBefore + 1);
  expect(await timed('complete')).toBe(completesBefore);
});

it('counts and publishes a takeover, and the lock the hung attempt lost', async () => {
  const key = newKey();
  const hung = await sendHeld('/m/hung', key);
  // The hung handler's lease lapses past maxHoldSeconds: a retry takes the key over.
  await waitFor(async () => {
    const response = await post('/m/hung', key);
    return response.status === 409 ? undefined : response;
  }, 'a retry to take the key over');
  await expect(outcomes('hung', 'takeover')).resolves.toBe(1);
  expect(recorded.events.takeover).toEqual([
    { scope: { account: 'acct-secret', endpoint: 'POST /m/hung', key }, attempt: expect.any(String) },
  ]);
  hung.gate.release();
  expect((await hung.answer).status).toBe(409);
  expect(recorded.events.lockLost).toEqual([
    { scope: expect.objectContaining({ key }), attempt: expect.any(String), during: 'complete' },
  ]);
  expect(recorded.events.lockLost[0].attempt).not.toBe(recorded.events.takeover[0].attempt);
});

it('counts and publishes a store that does not answer: a claim refused with 503, its duration with error.type', async () => {
  proxy.takeDown();
  try {
    await post('/m/charge', newKey()).expect(503);
  } finally {
    proxy.bringUp();
  }
  await expect(outcomes('charge', 'store_unavailable')).resolves.toBe(1);
  expect(recorded.events.storeUnavailable).toEqual([
    expect.objectContaining({ operation: 'claim', scope: expect.objectContaining({ endpoint: 'POST /m/charge' }) }),
  ]);
  const failedClaims = (await telemetry.points('idempotency.store.operation.duration')).filter(
    (point) => point.attributes['idempotency.store.operation'] === 'claim' && point.attributes['error.type'],
  );
  expect(failedClaims).toHaveLength(1);
});

it('counts and publishes a finalize retried, then given up', async () => {
  const key = newKey();
  const held = await sendHeld('/m/finalize', key);
  proxy.takeDown();
  try {
    held.gate.release();
    expect((await held.answer).status).toBe(201); // the response does not wait for its finalize
    // Waits for this key's: a key of an earlier scenario may give up meanwhile, on an endpoint of its own.
    await waitFor(
      async () => (recorded.events.finalizeGaveUp.some((event) => event.scope.key === key) ? true : undefined),
      'the finalize to give up',
    );
  } finally {
    proxy.bringUp();
  }
  await expect(outcomes('finalize', 'finalize.retried')).resolves.toBe(1);
  await expect(outcomes('finalize', 'finalize.gave_up')).resolves.toBe(1);
  expect(recorded.events.finalizeGaveUp.filter((event) => event.scope.key === key)).toEqual([
    {
      scope: expect.objectContaining({ key }),
      attempt: expect.any(String),
      finalize: 'store',
      error: expect.anything(),
    },
  ]);
  expect(recorded.events.storeUnavailable.at(-1)).toMatchObject({ operation: 'complete', scope: { key } });
});

it("counts IdempotencyService.execute() as the operation transport, its spans children of the caller's", async () => {
  const idempotency = server.app.get(IdempotencyService);
  const key = newKey();
  await trace.getTracer('job').startActiveSpan('payout job', async (job) => {
    await idempotency.execute({ name: 'payout', key }, async () => 'paid');
    job.end();
  });
  const operation = { 'idempotency.transport': 'operation', 'idempotency.endpoint': 'operation payout' };
  await expect(telemetry.count('idempotency.outcomes', { ...operation, 'idempotency.outcome': 'new' })).resolves.toBe(
    1,
  );
  const spans = telemetry.finishedSpans();
  const job = spans.find((span) => span.name === 'payout job')!;
  const children = spans.filter((span) => span.parentSpanContext?.spanId === job.spanContext().spanId);
  expect(children.map((span) => span.name).sort()).toEqual([
    'idempotency claim',
    'idempotency finalize',
    'idempotency run',
  ]);
  for (const child of children) expect(child.attributes).toMatchObject(operation);
});

it('counts a stored outcome that cannot be read (record_unreadable), refused and never run again', async () => {
  const sealed = newKey();
  const copy = newKey();
  const runsBefore = await outcomes('charge', 'new'); // the route's first test ran it too
  await post('/m/charge', sealed, { amount: 3 }).expect(201);
  // The record copied under another key: its envelope is bound to the first key's scope, so it does not decrypt.
  await db.query(
    `INSERT INTO idempotency_records
       SELECT (jsonb_populate_record(r, jsonb_build_object('idempotency_key', $2::text))).*
       FROM idempotency_records r WHERE r.idempotency_key = $1`,
    [sealed, copy],
  );
  await post('/m/charge', copy, { amount: 3 }).expect(500);
  await expect(outcomes('charge', 'record_unreadable')).resolves.toBe(1);
  await expect(outcomes('charge', 'new')).resolves.toBe(runsBefore + 1);
  expect(server.logger.errors.join('\n')).toMatch(/cannot be read/);
});

it('never puts a key or an account in an attribute', async () => {
  const values = [
    ...(await telemetry.allPoints()).flatMap((point) => Object.values(point.attributes)),
    ...telemetry.finishedSpans().flatMap((span) => Object.values(span.attributes)),
  ].map(String);
  expect(values.length).toBeGreaterThan(0);
  for (const secret of [...keys, 'acct-secret']) {
    expect(values.filter((value) => value.includes(secret))).toEqual([]);
  }
});
