import { randomUUID } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { RedisIdempotencyStore } from '../../src/redis/index.js';
import type { ClaimTiming, IdempotencyScope, StoredResponse } from '../../src/store/index.js';
import { type LocalRedisServer, startRedisServer } from '../support/redis-cluster.js';
import { redisCluster } from '../support/redis.js';
import { describeWith } from '../support/required-service.js';

// A connection cut after Redis ran a script and before its reply came back (a network cut, a proxy or load balancer
// resetting it, `CLIENT KILL`). ioredis's default `autoResendUnfulfilledCommands: true` sends every command that had
// no reply again once it has reconnected, so the store's script runs twice for one call, and the second run answers
// the call. Each script must answer its second run as its first (record-scripts.ts), or:
//  - a claim run twice finds the attempt's own record in progress and answers `in_progress`: the request is refused
//    409 (no handler runs), and its key stays held by that claim until its lease lapses (60 s by default), every
//    retry refused 409 meanwhile;
//  - an outcome stored twice finds the record completed and answers 0 ("taken over by another attempt"): the
//    client whose handler ran, and whose outcome is stored, is refused 409.
// Found on an app through such a proxy by an adversarial review. The proxy here forwards everything, and when
// armed cuts both sides as the reply to the armed command arrives. (The store contract refuses a second complete of a
// completed claim with another outcome; a run sent again carries the very same outcome, which a script can tell.)

const LONG: ClaimTiming = { leaseSeconds: 60, ttlSeconds: 3600 };
const response: StoredResponse = { status: 201, headers: {}, body: Buffer.from('{"id":"ch_1"}') };
const newScope = (): IdempotencyScope => ({ account: 'acct', endpoint: 'POST /charges', key: randomUUID() });

/** A TCP proxy to `port` that, once `armWith(text)`, cuts the connection that sent `text` when its reply arrives. */
async function replyCuttingProxy(port: number) {
  let armed: string | undefined;
  const sockets = new Set<Socket>();
  const server: Server = createServer((downstream) => {
    const upstream = connect(port, '127.0.0.1');
    sockets.add(downstream).add(upstream);
    let cutOnReply = false;
    downstream.on('data', (data) => {
      if (armed !== undefined && data.includes(armed)) {
        armed = undefined;
        cutOnReply = true;
      }
      upstream.write(data);
    });
    upstream.on('data', (data) => {
      if (cutOnReply) {
        downstream.destroy();
        upstream.destroy();
      } else downstream.write(data);
    });
    for (const [one, other] of [
      [downstream, upstream],
      [upstream, downstream],
    ]) {
      one.on('error', () => other.destroy());
      one.on('close', () => {
        other.destroy();
        sockets.delete(one);
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port: proxyPort } = server.address() as { port: number };
  return {
    port: proxyPort,
    armWith: (text: string) => (armed = text),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describeWith(redisCluster, 'The Redis store when a reply is lost and ioredis sends the script again', () => {
  let server: LocalRedisServer;
  let proxy: Awaited<ReturnType<typeof replyCuttingProxy>>;
  let client: Redis;
  let store: RedisIdempotencyStore;

  beforeAll(async () => {
    server = await startRedisServer();
    proxy = await replyCuttingProxy(server.port);
    // An application's client with ioredis's defaults, through the proxy.
    client = new Redis(proxy.port, '127.0.0.1');
    client.on('error', () => undefined);
    store = new RedisIdempotencyStore(client, { outcomeWaits: 'polling' });
    // Loads the scripts, so that what goes out next is EVALSHA (not EVAL after NOSCRIPT).
    const scope = newScope();
    const attempt = randomUUID();
    await store.claim(scope, 'fp', attempt, LONG);
    await store.complete({ scope, attempt }, response, 60);
  });
  afterAll(async () => {
    await store.close();
    client.disconnect();
    await proxy.close();
    await server.stop();
  });

  it("answers a claim whose first run's reply was lost as this attempt's claim, not as another's in progress", async () => {
    const scope = newScope();
    const attempt = randomUUID();
    proxy.armWith(attempt);
    // Answered in progress, the attempt's own claim would hold its key until its lease lapsed (409 to every retry).
    expect(await store.claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
  });

  it("answers an outcome whose first run's reply was lost as stored by this attempt, not as taken over", async () => {
    const scope = newScope();
    const attempt = randomUUID();
    expect(await store.claim(scope, 'fp', attempt, LONG)).toEqual({ claimed: true, takeover: false });
    proxy.armWith('{"id":"ch_1"}');
    // Answered false, the module would answer 409 although the outcome is stored.
    expect(await store.complete({ scope, attempt }, response, 60)).toBe(true);
  });
});
