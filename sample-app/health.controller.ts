import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { IdempotencyHealthIndicator } from '../src/terminus/index.js';
import { Public } from './auth/api-key.guard.js';

@Controller('health')
@Public()
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly idempotency: IdempotencyHealthIndicator,
  ) {}

  /**
   * 200 while the database answers (the idempotency store's round trip, on the app's data source) and, where
   * requests wait for an attempt in flight, the store listens for outcomes; 503 otherwise, terminus' body saying why.
   */
  @Get()
  @HealthCheck()
  check() {
    return this.health.check([() => this.idempotency.isHealthy('idempotency')]);
  }
}
