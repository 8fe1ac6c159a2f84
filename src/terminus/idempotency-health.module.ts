import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { IdempotencyHealthIndicator } from './idempotency-health.indicator.js';

/**
 * `imports: [TerminusModule, IdempotencyHealthModule]` beside `IdempotencyModule.forRoot()`: gives the application's
 * health controller `IdempotencyHealthIndicator`, on the store `IdempotencyModule` was given. Terminus' own module is
 * imported for its `HealthIndicatorService`; the application configures its own (`TerminusModule.forRoot()`).
 */
@Module({
  imports: [TerminusModule],
  providers: [IdempotencyHealthIndicator],
  exports: [IdempotencyHealthIndicator],
})
export class IdempotencyHealthModule {}
