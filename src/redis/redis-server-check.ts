import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import type { RedisClient } from './record-scripts.js';
import { primariesOf } from './redis-primaries.js';

/** The oldest Redis the scripts run on: 5.0 replicates a script's effects, so one may read `TIME` before it writes. */
export const MINIMUM_REDIS_VERSION = [5, 0] as const;

/**
 * What makes a Redis server unfit for the records, from its `INFO server` and `INFO memory`, each fault with its fix;
 * empty when it is fit. Any eviction policy but `noeviction` may evict a record (they all have a TTL), and a record
 * evicted is a charge run twice.
 */
export function redisServerFaults(info: string): string[] {
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  const faults: string[] = [];
  const version = field('redis_version');
  const [major = 0, minor = 0] = (version ?? '').split('.').map(Number);
  const [minimumMajor, minimumMinor] = MINIMUM_REDIS_VERSION;
  if (version !== undefined && (major < minimumMajor || (major === minimumMajor && minor < minimumMinor))) {
    faults.push(
      `it runs Redis ${version}, and the store's scripts need ${minimumMajor}.${minimumMinor} or later: upgrade it`,
    );
  }
  const policy = field('maxmemory_policy');
  if (policy !== undefined && policy !== 'noeviction') {
    faults.push(
      `its maxmemory-policy is ${policy}, which may evict a record, and a retry of an evicted record runs again: ` +
        'set `maxmemory-policy noeviction` (a full Redis then refuses new claims, answered 503, rather than forgetting ' +
        'outcomes)',
    );
  }
  return faults;
}

/**
 * Refuses a server the records cannot live on, naming each fault and its fix; for a Redis Cluster, checks every
 * primary. Rejects with another error when it could not tell (the server unreachable now).
 */
export async function checkRedisServers(client: RedisClient): Promise<void> {
  for (const server of await primariesOf(client)) {
    const info = `${await server.info('server')}\n${await server.info('memory')}`;
    const faults = redisServerFaults(info);
    if (faults.length === 0) continue;
    const { host, port } = server.options;
    throw new IdempotencySetupError(
      `The Redis at ${host ?? '127.0.0.1'}:${port ?? 6379} cannot keep idempotency records: ${faults.join('; ')}.`,
    );
  }
}
