import { HTTP_PROFILES, type HttpProfileName } from '../src/http/index.js';

/** Everything the sample app reads from its environment. */
export interface SampleConfig {
  /** postgres:// URL; `npm start` starts an embedded PostgreSQL when DATABASE_URL is unset. */
  databaseUrl: string;
  /** The most connections the app's TypeORM pool opens (the payment provider's ledger has 4 of its own). */
  databasePoolSize: number;
  /**
   * Whether `databaseUrl` goes through a transaction pooler, PgBouncer in transaction mode say
   * (`DATABASE_TRANSACTION_POOLER`): the idempotency store then sends unnamed statements. Needs `databaseDirectUrl`.
   */
  transactionPooler: boolean;
  /**
   * A postgres:// URL straight to PostgreSQL (`DATABASE_DIRECT_URL`), for what must not go through a pooler: the
   * migrations, which hold a session advisory lock while they run, the store's LISTEN, and the fake payment
   * provider's ledger (an external service's database). Unset, they all use `databaseUrl`.
   */
  databaseDirectUrl?: string;
  port: number;
  ttlSeconds: number;
  leaseSeconds: number;
  /** Latency of the fake payment provider per charge. */
  providerDelayMs: number;
  /** Whether charges, refunds and PATCH commit their writes with their stored outcome. */
  transactional: boolean;
  /** What a request whose key is in progress gets: 409 at once, or the outcome after a short wait. */
  inFlight: 'conflict' | 'wait';
  /** The dialect of the module's answers (`IDEMPOTENCY_PROFILE`): its own, Stripe's, or RFC 9457 problem details. */
  profile: HttpProfileName;
  /**
   * How often the completer looks for charges their clients abandoned (`IDEMPOTENCY_COMPLETER_INTERVAL_SECONDS`), and
   * how long after a lease ended it leaves one for the client's retry (`IDEMPOTENCY_COMPLETER_BACKOFF_SECONDS`).
   * `off`: no completer.
   */
  completerIntervalSeconds: number | false;
  completerBackoffSeconds: number;
  /** On SIGTERM/SIGINT, how long running charges may take to finish before their claims are released. */
  shutdownTimeoutSeconds: number;
  /** Whether this process pays pending payouts in the background, and how often it looks for them. */
  payoutWorker: boolean;
  payoutPollMs: number;
  /** The HTTP platform the app runs on: Nest's default Express, or Fastify (`@nestjs/platform-fastify`). */
  platform: 'express' | 'fastify';
  /** The RabbitMQ broker to consume payout requests from (`RABBITMQ_URL`, `PAYOUT_QUEUE`); none without a URL. */
  rabbitmq?: { url: string; queue: string };
  /**
   * The NATS JetStream server to consume payout requests from (`NATS_URL`), its stream and durable consumer
   * (`PAYOUT_STREAM`, `PAYOUT_DURABLE`), and the consumer's ack wait (`PAYOUT_ACK_WAIT_SECONDS`); none without a URL.
   */
  jetstream?: { url: string; stream: string; durable: string; ackWaitSeconds: number };
  /**
   * The credential of the page's operator view and its `/operator` routes (`OPERATOR_TOKEN`), sent as
   * `X-Operator-Token`; unset, the view and its routes are off. Never an API key: charge clients never get it.
   */
  operatorToken?: string;
  /** Where Prometheus scrapes the app's OpenTelemetry metrics (`METRICS_PORT`, path `/metrics`); none when unset. */
  metricsPort?: number;
  /**
   * Test-only: where a payout message's consumer, or a charge at one of its steps, stops until it is killed
   * (`SAMPLE_PAUSE_AT`, `test-pause.ts`).
   */
  pauseAt?: PausePoint;
}

/** The steps of a charge (`ChargesService.create`), in their order. */
export const CHARGE_STEPS = ['create-charge', 'charge-card', 'record-result', 'send-receipt'] as const;
export type ChargeStep = (typeof CHARGE_STEPS)[number];

/** Where a payout message's consumer can stop. */
export const PAYOUT_PAUSE_POINTS = ['before-claim', 'after-provider', 'before-ack'] as const;
export type PayoutPausePoint = (typeof PAYOUT_PAUSE_POINTS)[number];

// Each charge step's: inside it (its work done, its recovery point not yet recorded, its transaction not committed)
// and after it (recorded).
export const PAUSE_POINTS = [
  ...PAYOUT_PAUSE_POINTS,
  ...CHARGE_STEPS.flatMap((step) => [`in-step:${step}`, `after-step:${step}`] as const),
] as const;
export type PausePoint = (typeof PAUSE_POINTS)[number];

export const SAMPLE_CONFIG = Symbol('SAMPLE_CONFIG');

export function sampleConfigFromEnv(env: NodeJS.ProcessEnv, databaseUrl: string): SampleConfig {
  const transactionPooler = choice(env, 'DATABASE_TRANSACTION_POOLER', ['true', 'false'], 'false') === 'true';
  const databaseDirectUrl = env.DATABASE_DIRECT_URL || undefined;
  // Through the pooler, the migrations' session lock would be let go with each transaction, and LISTEN would miss
  // its notifications: refused here, before anything runs, rather than found out at the first concurrent start.
  if (transactionPooler && databaseDirectUrl === undefined) {
    throw new Error(
      'DATABASE_TRANSACTION_POOLER=true needs DATABASE_DIRECT_URL: a postgres:// URL straight to PostgreSQL (not ' +
        'through the pooler), on which the migrations hold their advisory lock and waits LISTEN',
    );
  }
  return {
    databaseUrl,
    databasePoolSize: integer(env, 'DATABASE_POOL_SIZE', 20, 1),
    transactionPooler,
    databaseDirectUrl,
    port: integer(env, 'PORT', 3000, 0),
    ttlSeconds: integer(env, 'IDEMPOTENCY_TTL_SECONDS', 24 * 60 * 60, 1),
    leaseSeconds: integer(env, 'IDEMPOTENCY_LEASE_SECONDS', 60, 1),
    providerDelayMs: integer(env, 'PROVIDER_DELAY_MS', 0, 0),
    transactional: choice(env, 'IDEMPOTENCY_TRANSACTIONAL', ['true', 'false'], 'true') === 'true',
    inFlight: choice(env, 'IDEMPOTENCY_IN_FLIGHT', ['conflict', 'wait'], 'conflict'),
    profile: profileFromEnv(env),
    completerIntervalSeconds:
      env.IDEMPOTENCY_COMPLETER_INTERVAL_SECONDS === 'off'
        ? false
        : integer(env, 'IDEMPOTENCY_COMPLETER_INTERVAL_SECONDS', 30, 1),
    completerBackoffSeconds: integer(env, 'IDEMPOTENCY_COMPLETER_BACKOFF_SECONDS', 10, 1),
    shutdownTimeoutSeconds: integer(env, 'IDEMPOTENCY_SHUTDOWN_TIMEOUT_SECONDS', 10, 1),
    payoutWorker: choice(env, 'PAYOUT_WORKER', ['true', 'false'], 'true') === 'true',
    payoutPollMs: integer(env, 'PAYOUT_POLL_MS', 500, 10),
    platform: choice(env, 'SAMPLE_PLATFORM', ['express', 'fastify'], 'express'),
    rabbitmq: env.RABBITMQ_URL ? { url: env.RABBITMQ_URL, queue: env.PAYOUT_QUEUE || 'sample.payouts' } : undefined,
    jetstream: env.NATS_URL
      ? {
          url: env.NATS_URL,
          stream: env.PAYOUT_STREAM || 'SAMPLE_PAYOUTS',
          durable: env.PAYOUT_DURABLE || 'sample-payouts',
          ackWaitSeconds: integer(env, 'PAYOUT_ACK_WAIT_SECONDS', 30, 1),
        }
      : undefined,
    operatorToken: env.OPERATOR_TOKEN || undefined,
    metricsPort: env.METRICS_PORT ? integer(env, 'METRICS_PORT', 9464, 1) : undefined,
    pauseAt: env.SAMPLE_PAUSE_AT ? choice(env, 'SAMPLE_PAUSE_AT', PAUSE_POINTS, PAUSE_POINTS[0]) : undefined,
  };
}

/** `IDEMPOTENCY_PROFILE`: read apart too, by the OpenAPI decorators, which are evaluated before any config is made. */
export function profileFromEnv(env: NodeJS.ProcessEnv): HttpProfileName {
  return choice(env, 'IDEMPOTENCY_PROFILE', HTTP_PROFILES, 'default');
}

function choice<T extends string>(env: NodeJS.ProcessEnv, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw))
    throw new Error(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(raw)}`);
  return raw as T;
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min)
    throw new Error(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return value;
}
