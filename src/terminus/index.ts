// The public API of `nest-idempotency/terminus`: the store's health for `@nestjs/terminus` (an optional peer
// dependency), which the main entry point does not load.
export { IdempotencyHealthModule } from './idempotency-health.module.js';
export { IdempotencyHealthIndicator } from './idempotency-health.indicator.js';
export type { IdempotencyHealthCheckOptions } from './idempotency-health-check-options.interface.js';
