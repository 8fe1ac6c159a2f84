/** Options of one health check: `IdempotencyHealthIndicator.isHealthy(key, options)`. */
export interface IdempotencyHealthCheckOptions {
  /**
   * How long the check may take in all: the store's round trip, then (when waits listen for outcomes) opening the
   * listening connection again if it was lost. Past it, the indicator is down. Default: 1000 ms, as terminus' own
   * database checks.
   */
  timeoutMs?: number;
}
