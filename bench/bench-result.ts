import type { Platform } from '../test/support/sample-app.js';

/** The names of the rows that the targets and the chart pick out (a Fastify row's with `fastify: ` before it). */
export const PEER_NAME = 'peer @node-idempotency/nestjs (Redis)';
export const REDIS_NEW_KEYS = 'standard on Redis, new keys';
export const REDIS_REPLAYS = 'replays on Redis';
export const REDIS_REPLAYS_UNCACHED = 'replays on Redis, from Redis';

/** What one bench row measured: its rate, latencies, errors and statuses, over the rounds it ran. */
export interface Measure {
  requestsPerSecond: number;
  p50: number;
  p99: number;
  max: number;
  errors: number;
  statuses: Record<string, number>;
  /** The server's checkpoints that ended during the measured seconds (each of all rounds, summed in a result). */
  checkpoints: number;
  /**
   * The statements the app's idempotency store sent per request (each one round trip to PostgreSQL): 0 for a route
   * without the module, null where the app's store does not count them (the peer's, the consumer's).
   */
  roundTripsPerRequest: number | null;
  /** The app process's CPU time per request, in microseconds: steadier than a rate on a shared machine. Null for the consumer rows. */
  cpuMicrosPerRequest: number | null;
}

export interface BenchResult extends Measure {
  config: string;
  name: string;
  connections: number;
  platform: Platform;
  /** To the baseline of its platform (at the same concurrency, or at 64). */
  ratio: number;
  /** A Fastify row's to the same configuration on Express; null on Express's rows, or when it was not measured. */
  ratioToExpress: number | null;
}
