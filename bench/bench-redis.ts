import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { Redis } from 'ioredis';

/** The Redis of the bench's apps on Redis, ours and the peer's: BENCH_REDIS_URL, default redis://127.0.0.1:6379. */
export const BENCH_REDIS_URL = process.env.BENCH_REDIS_URL || 'redis://127.0.0.1:6379';

/**
 * A prefix of one run's own (`nest-idempotency-bench-<uuid>:`): every key that its apps write on the shared Redis
 * starts with it, each app's under a name of its own after it, so that runs never see each other's records and
 * `deleteRedisKeys` finds them all.
 */
export const newRedisPrefix = () => `nest-idempotency-bench-${randomUUID()}:`;

/** Why Redis cannot be reached at BENCH_REDIS_URL (a TCP connection within 2 s), or undefined. */
export async function redisUnreachable(): Promise<string | undefined> {
  const url = new URL(BENCH_REDIS_URL);
  const port = Number(url.port || 6379);
  const failed = await new Promise<string | undefined>((resolve) => {
    const socket = connect({ host: url.hostname, port, timeout: 2000 });
    socket.once('connect', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve('timed out');
    });
    socket.once('error', (error) => resolve(error.message));
  });
  return failed && `Redis not reachable at ${url.hostname}:${port} (${failed})`;
}

/**
 * Deletes the keys under `prefix` (a run's, ours and the peer's): our records would stay until their TTL (a day by
 * default), the peer's an hour, on a Redis that other work shares. Returns how many there were.
 */
export async function deleteRedisKeys(prefix: string): Promise<number> {
  const client = new Redis(BENCH_REDIS_URL, { lazyConnect: true, retryStrategy: () => null });
  client.on('error', () => undefined); // a failure rejects the command that met it
  try {
    await client.connect();
    let deleted = 0;
    // SCAN in steps, not KEYS, which would block the shared server while it walks every key.
    for await (const keys of client.scanStream({ match: `${prefix}*`, count: 1000 }) as AsyncIterable<string[]>)
      if (keys.length > 0) deleted += await client.unlink(...keys);
    return deleted;
  } finally {
    client.disconnect();
  }
}
