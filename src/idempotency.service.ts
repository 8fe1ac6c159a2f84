import { randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import { IDEMPOTENCY_STORE } from './idempotency.constants.js';
import {
  IdempotencyKeyReuseError,
  IdempotencyStoreUnavailableError,
  RequestInProgressError,
} from './idempotency.errors.js';
import { IDEMPOTENCY_MODULE_OPTIONS } from './idempotency.module-definition.js';
import type { IdempotencyModuleOptions } from './idempotency-options.interface.js';
import { type IdempotencyPolicy, resolvePolicy, resolvePurgeSettings } from './idempotency-policy.js';
import type {
  IdempotencyClaim,
  IdempotencyScope,
  IdempotencyStore,
  StoredResponse,
} from './idempotency-store.interface.js';

/** What an attempt does next: run the work under its claim, or replay the stored outcome. */
export type IdempotencyDecision =
  | { action: 'run'; claim: IdempotencyClaim }
  | { action: 'replay'; response: StoredResponse };

/**
 * The protocol, independent of HTTP: claim the key, compare fingerprints, replay or run, then finalize.
 */
@Injectable()
export class IdempotencyService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('Idempotency');
  private readonly purge: ReturnType<typeof resolvePurgeSettings>;
  private purgeTimer?: NodeJS.Timeout;

  constructor(
    @Inject(IDEMPOTENCY_STORE) private readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) private readonly options: IdempotencyModuleOptions,
  ) {
    resolvePolicy(options); // invalid module options fail at start-up, not on the first request
    this.purge = resolvePurgeSettings(options);
  }

  onModuleInit(): void {
    if (!this.options.accountResolver) {
      this.logger.warn(
        'No accountResolver is configured: idempotency keys are scoped per endpoint only, so two clients ' +
          'sending the same key to the same endpoint share one record. Configure one for multi-tenant APIs.',
      );
    }
    const interval = this.purge.intervalSeconds;
    if (interval !== undefined) {
      this.purgeTimer = setInterval(() => {
        this.purgeExpired().catch((error: unknown) => this.logger.error(`Purging expired records failed: ${error}`));
      }, interval * 1000);
      this.purgeTimer.unref();
    }
  }

  onModuleDestroy(): void {
    clearInterval(this.purgeTimer);
  }

  /**
   * One lookup, four outcomes: a new key is claimed (run the work); a key used with a different request
   * is refused (422); a key still in progress is refused with a retry hint (409); a completed key is replayed.
   * The claim is committed before this resolves, so the work never runs inside the claim's transaction.
   */
  async begin(scope: IdempotencyScope, fingerprint: string, policy: IdempotencyPolicy): Promise<IdempotencyDecision> {
    const claim: IdempotencyClaim = { scope, attempt: randomUUID() };
    const timing = { leaseSeconds: policy.leaseSeconds, ttlSeconds: policy.ttlSeconds };
    const result = await withTimeout(this.store.claim(scope, fingerprint, claim.attempt, timing), policy, 'claim').catch(
      (error: unknown) => {
        this.logger.error(`Claiming ${describe(scope)} failed; the request is refused with 503: ${error}`);
        throw new IdempotencyStoreUnavailableError(policy.retryAfterSeconds);
      },
    );
    if (result.claimed) return { action: 'run', claim };

    const { existing } = result;
    if (existing.fingerprint !== fingerprint) throw new IdempotencyKeyReuseError();
    if (existing.status === 'in_progress') throw new RequestInProgressError(policy.retryAfterSeconds);
    return { action: 'replay', response: existing.response };
  }

  /**
   * Ends the attempt: a final outcome is stored for replay; anything else (no storable response, a 400,
   * a 5xx) releases the claim so that a retry runs again. Only the claim's holder can do either.
   */
  async finish(claim: IdempotencyClaim, response: StoredResponse | undefined, policy: IdempotencyPolicy): Promise<void> {
    const store = response !== undefined && policy.isFinalStatus(response.status);
    const held = await withTimeout(
      store ? this.store.complete(claim, response, policy.ttlSeconds) : this.store.release(claim),
      policy,
      store ? 'storing the outcome' : 'releasing the claim',
    );
    if (!held) {
      this.logger.warn(
        `The claim on ${describe(claim.scope)} was taken over by another attempt; this attempt's outcome was not ${
          store ? 'stored' : 'released'
        }.`,
      );
    }
  }

  /** Deletes every expired record, one bounded batch per statement; returns how many it deleted. */
  async purgeExpired(batchSize: number = this.purge.batchSize): Promise<number> {
    resolvePurgeSettings({ purgeBatchSize: batchSize });
    let total = 0;
    for (;;) {
      const purged = await this.store.purgeExpired(batchSize);
      total += purged;
      if (purged < batchSize) return total;
    }
  }
}

/** Bounds a store operation; the operation itself is not cancelled, its result is no longer awaited. */
async function withTimeout<T>(operation: Promise<T>, policy: IdempotencyPolicy, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${what} took longer than storeTimeoutSeconds (${policy.storeTimeoutSeconds} s)`)),
      policy.storeTimeoutSeconds * 1000,
    );
  });
  try {
    return await Promise.race([operation, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function describe(scope: IdempotencyScope): string {
  return `key ${JSON.stringify(scope.key)} of ${scope.endpoint}`;
}
