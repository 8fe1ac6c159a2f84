import { Inject, Injectable, Optional } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import type { ProtocolModuleOptions } from '../protocol/idempotency-options.interface.js';
import { IdempotencySetupError } from '../protocol/idempotency-setup.error.js';
import type { IdempotencyStore } from '../protocol/idempotency-store.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from '../protocol/idempotency.tokens.js';
import { IdempotencyService } from '../protocol/idempotency.service.js';
import { positive } from '../protocol/option-checks.js';
import { within } from '../protocol/store-bounds.js';
import type { IdempotencyHealthCheckOptions } from './idempotency-health-check-options.interface.js';

/** As terminus' own database checks (`TypeOrmHealthIndicator.pingCheck`). */
const DEFAULT_TIMEOUT_MS = 1000;

/**
 * The idempotency store's health, for `@nestjs/terminus`' `HealthCheckService`: up while the store answers a round
 * trip within the bound and, where attempts wait for outcomes in flight, listens for them; down otherwise. Its details
 * say what was found (`store`: reachable or unreachable, `latencyMs`, `listening`: up, down or not needed, and the
 * error's message when down), never the store's configuration. Down too from the moment shutdown's drain begins
 * (`shuttingDown: true`), for a readiness probe.
 */
@Injectable()
export class IdempotencyHealthIndicator {
  private readonly store: IdempotencyStore & Required<Pick<IdempotencyStore, 'checkHealth'>>;
  /** The module's `inFlight: 'wait'`: listening is checked from the first check on, not from the first wait. */
  private readonly waitsForOutcomes: boolean;

  constructor(
    private readonly healthIndicatorService: HealthIndicatorService,
    @Optional() @Inject(IDEMPOTENCY_STORE) store?: IdempotencyStore,
    @Optional() @Inject(IDEMPOTENCY_MODULE_OPTIONS) moduleOptions?: ProtocolModuleOptions,
    @Optional() private readonly idempotency?: IdempotencyService,
  ) {
    if (store === undefined) {
      throw new IdempotencySetupError(
        'IdempotencyHealthIndicator finds no idempotency store: import IdempotencyModule.forRoot() in the root ' +
          'module (it is global unless `isGlobal: false`; then import IdempotencyHealthModule in the module that ' +
          'imports it).',
      );
    }
    if (typeof store.checkHealth !== 'function') {
      throw new IdempotencySetupError(
        `IdempotencyHealthIndicator cannot check the idempotency store ${store.constructor.name}: it has no ` +
          'checkHealth() method. Implement checkHealth(timeoutMs) in the store (a round trip within the bound; see ' +
          'IdempotencyStore), or leave the indicator out of the health checks.',
      );
    }
    this.store = store as IdempotencyHealthIndicator['store'];
    this.waitsForOutcomes = moduleOptions?.inFlight === 'wait';
  }

  /** Checks the store within `options.timeoutMs`; the result is `{ [key]: { status, ...details } }`. */
  async isHealthy<const Key extends string = 'idempotency'>(
    key: Key = 'idempotency' as Key,
    options: IdempotencyHealthCheckOptions = {},
  ): Promise<HealthIndicatorResult<Key>> {
    const timeoutMs = positive('timeoutMs', options.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    const indicator = this.healthIndicatorService.check(key);
    const started = performance.now();
    const latencyMs = () => Math.round(performance.now() - started);
    // Down for readiness from the drain's first moment: a load balancer stops sending what the instance now refuses.
    if (this.idempotency?.shuttingDown) {
      return indicator.down({
        shuttingDown: true,
        latencyMs: latencyMs(),
        message:
          'the instance is shutting down: it refuses new idempotent requests (503 idempotency_shutting_down) while ' +
          'its running attempts finish',
      });
    }
    // Bounded here too: a store of the application's own may not keep to its bound.
    const check = within(
      this.store.checkHealth(timeoutMs, { listen: this.waitsForOutcomes }),
      timeoutMs,
      () => new Error(`the store did not answer within ${timeoutMs} ms`),
    );
    let listening: boolean | undefined;
    try {
      ({ listening } = await check);
    } catch (error) {
      return indicator.down({ store: 'unreachable', latencyMs: latencyMs(), message: faultOf(error) });
    }
    if (listening === false) {
      return indicator.down({
        store: 'reachable',
        latencyMs: latencyMs(),
        listening: 'down',
        message: `the store does not listen for outcomes (not within ${timeoutMs} ms, or closed by a shutdown): waiting attempts are not woken by outcomes and wait out their inFlightWaitSeconds`,
      });
    }
    return indicator.up({ store: 'reachable', latencyMs: latencyMs(), listening: listening ? 'up' : 'not needed' });
  }
}

/** A Node.js system error (a refused or timed-out connection, a name not resolved): its call and code. */
interface SystemError {
  syscall: string;
  code: string;
}

/**
 * What failed, for a health route that is often public: a system error by its call and code (`connect ECONNREFUSED`),
 * since its message names the host and port it was about; the driver's message otherwise. Found where drivers and
 * pools put it: the error itself, its `cause`, or the errors of an `AggregateError` (one per address tried).
 */
function faultOf(error: unknown): string {
  const system = systemErrorIn(error, 3);
  if (system) return `${system.syscall} ${system.code}`;
  return error instanceof Error ? error.message : String(error);
}

function systemErrorIn(error: unknown, depth: number): SystemError | undefined {
  if (typeof error !== 'object' || error === null || depth < 0) return undefined;
  const { syscall, code, cause, errors } = error as Partial<SystemError> & { cause?: unknown; errors?: unknown };
  if (typeof syscall === 'string' && typeof code === 'string') return { syscall, code };
  const inner = [cause, ...(Array.isArray(errors) ? (errors as unknown[]) : [])];
  for (const candidate of inner) {
    const found = systemErrorIn(candidate, depth - 1);
    if (found) return found;
  }
  return undefined;
}
