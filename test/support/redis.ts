import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis, type RedisOptions } from 'ioredis';
import { requireService } from './required-service.js';

/** The Redis of the suites on one Redis: `REDIS_URL`, by default one on this machine's default port. */
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

export const redis = await requireService('Redis', async () => {
  try {
    await onOneTryConnection(REDIS_URL, { connectTimeout: 3_000 }, (client) => client.ping());
    return undefined;
  } catch (error) {
    return `Redis cannot be reached at ${REDIS_URL} (set REDIS_URL): ${(error as Error).message}`;
  }
});

/**
 * `use` on a connection to `target` tried once, failing fast: a Redis that is not there is told in seconds, with what
 * went wrong (`connect()` itself rejects with only "Connection is closed"), not retried forever.
 */
export async function onOneTryConnection<T>(
  target: string | { host: string; port: number },
  options: RedisOptions,
  use: (client: Redis) => Promise<T>,
): Promise<T> {
  const settings: RedisOptions = {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    // Closed at once, rather than holding the test file's exit for up to 2 s when the connection failed.
    disconnectTimeout: 0,
    ...options,
  };
  const client = typeof target === 'string' ? new Redis(target, settings) : new Redis({ ...target, ...settings });
  let connectionError: Error | undefined;
  client.on('error', (error: Error) => (connectionError = error));
  try {
    await client.connect().catch((error: Error) => {
      throw connectionError ?? error;
    });
    return await use(client);
  } finally {
    client.disconnect();
  }
}

/**
 * The suites on a Redis Cluster start their own (`test/support/redis-cluster.ts`), of local `redis-server` processes
 * that `redis-cli` joins: both must be installed, of Redis 7 or later (the nodes' settings need it).
 */
export const redisCluster = await requireService('Redis Cluster', async () => {
  for (const program of ['redis-server', 'redis-cli']) {
    let version: string;
    try {
      version = (await promisify(execFile)(program, ['--version'], { timeout: 5_000 })).stdout;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') {
        return `${program} is not on PATH (install Redis 7 or later: apt-get install redis-server)`;
      }
      return `${program} cannot run: ${(error as Error).message}`;
    }
    const major = Number(/(\d+)\.\d+\.\d+/.exec(version)?.[1]);
    if (!(major >= 7)) return `${program} is not Redis 7 or later: ${version.trim()}`;
  }
  return undefined;
});

/** A client of the Redis at `REDIS_URL` for a test, which closes it (`quit()`). */
export function newRedisClient(options: RedisOptions = {}): Redis {
  return new Redis(REDIS_URL, options);
}
