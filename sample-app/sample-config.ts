/** Everything the sample app reads from its environment. */
export interface SampleConfig {
  /** postgres:// URL; `npm start` starts an embedded PostgreSQL when DATABASE_URL is unset. */
  databaseUrl: string;
  port: number;
  ttlSeconds: number;
  leaseSeconds: number;
  /** Latency of the fake payment provider per charge. */
  providerDelayMs: number;
}

export const SAMPLE_CONFIG = Symbol('SAMPLE_CONFIG');

export function sampleConfigFromEnv(env: NodeJS.ProcessEnv, databaseUrl: string): SampleConfig {
  return {
    databaseUrl,
    port: integer(env, 'PORT', 3000, 0),
    ttlSeconds: integer(env, 'IDEMPOTENCY_TTL_SECONDS', 24 * 60 * 60, 1),
    leaseSeconds: integer(env, 'IDEMPOTENCY_LEASE_SECONDS', 60, 1),
    providerDelayMs: integer(env, 'PROVIDER_DELAY_MS', 0, 0),
  };
}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return value;
}
