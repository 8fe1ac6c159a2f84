import { once } from 'node:events';
import { Cluster, type Redis } from 'ioredis';
import { within } from '../protocol/store-bounds.js';
import type { RedisClient } from './record-scripts.js';

/** How long a look at every server waits for the client to connect before it gives up. */
const CONNECT_BOUND_MS = 5_000;

/**
 * The servers that hold the records: the client's own, or every primary of a Cluster. The client is connected first
 * (one made with `lazyConnect` too): a Cluster knows its primaries only then, and a client without an offline queue
 * (`enableOfflineQueue: false`) refuses commands until then.
 */
export async function primariesOf(client: RedisClient): Promise<Redis[]> {
  if (client.status !== 'ready') {
    const ready: Promise<unknown> = client.status === 'wait' ? client.connect() : once(client, 'ready');
    await within(
      ready,
      CONNECT_BOUND_MS,
      () => new Error(`the Redis client did not connect within ${CONNECT_BOUND_MS} ms`),
    );
  }
  return client instanceof Cluster ? client.nodes('master') : [client];
}
