import { redis } from './redis.js';
import { describeWith, type RequiredService } from './required-service.js';
import { STANDARD_STORES, type StandardStore } from './test-app.js';

// Apart from test-app.ts, so that only the suites that run on Redis look for it (and load ioredis).

const SERVICES: Record<StandardStore, RequiredService> = { postgres: {}, redis };

/**
 * `describe(name, body)` once per store of `stores` (by default each store of standard mode), `%s` in `name` its name;
 * the block on Redis is skipped, saying why, where Redis is missing (under `CI=true` the file fails instead).
 */
export function describeOnStores(
  name: string,
  body: (store: StandardStore) => void,
  stores: readonly StandardStore[] = STANDARD_STORES,
): void {
  for (const store of stores) describeWith(SERVICES[store], name.replace('%s', store), () => body(store));
}

/**
 * For `describeWith`: a block about PostgreSQL itself (its records table, its locks, its pool), run on PostgreSQL and
 * skipped on the other stores, saying `why`.
 */
export function onPostgresOnly(store: StandardStore, why: string): RequiredService {
  return store === 'postgres' ? {} : { skipped: `PostgreSQL's alone: ${why}` };
}
