import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import type { IdempotencyRedisOptions } from './idempotency-redis-options.interface.js';
import type { RedisClient } from './record-scripts.js';
import { IDEMPOTENCY_REDIS_CLIENT } from './redis.tokens.js';

/** The client the records live on, and whether the module made it (from a factory in `client`) rather than got it. */
export interface ProvidedRedisClient {
  client: RedisClient;
  madeByTheModule: boolean;
}

/** The application's client, or the one its factory makes, once. */
export function provideRedisClient({ client }: IdempotencyRedisOptions): ProvidedRedisClient {
  return typeof client === 'function'
    ? { client: client(), madeByTheModule: true }
    : { client, madeByTheModule: false };
}

/**
 * Quits a client the module made from a factory once the application has shut down (after the store's drain and
 * close, in `beforeApplicationShutdown`): nothing else holds it, and its connection would keep the process alive. A
 * client the application passed is the application's to close.
 */
@Injectable()
export class RedisClientShutdown implements OnApplicationShutdown {
  constructor(@Inject(IDEMPOTENCY_REDIS_CLIENT) private readonly provided: ProvidedRedisClient) {}

  async onApplicationShutdown(): Promise<void> {
    if (!this.provided.madeByTheModule) return;
    const { client } = this.provided;
    await client.quit().catch(() => client.disconnect());
  }
}
