import { type BeforeApplicationShutdown, Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import type { ProtocolModuleOptions } from './idempotency-options.interface.js';
import { resolvePurgeSettings } from './idempotency-policy.js';
import { IdempotencySetupError } from './idempotency-setup.error.js';
import type { IdempotencyStore } from './idempotency-store.interface.js';
import { IDEMPOTENCY_MODULE_OPTIONS, IDEMPOTENCY_STORE } from './idempotency.tokens.js';
import { IdempotencyService } from './idempotency.service.js';

/**
 * The store's life beside the application's: checked at start-up, purged on a schedule, closed at shutdown once the
 * attempts still running have been drained. The decisions themselves are `IdempotencyService`'s.
 */
@Injectable()
export class IdempotencyLifecycle implements OnModuleInit, BeforeApplicationShutdown {
  private readonly logger = new Logger('Idempotency');
  /** The scheduled purge's timer (`purgeIntervalSeconds`); none when it is off. */
  private purgeTimer?: NodeJS.Timeout;
  private readonly purgeIntervalSeconds: number | false;

  constructor(
    @Inject(IDEMPOTENCY_STORE) private readonly store: IdempotencyStore,
    @Inject(IDEMPOTENCY_MODULE_OPTIONS) options: ProtocolModuleOptions,
    private readonly idempotency: IdempotencyService,
  ) {
    this.purgeIntervalSeconds = resolvePurgeSettings(options).intervalSeconds;
  }

  async onModuleInit(): Promise<void> {
    await this.checkStoreSchema();
    this.schedulePurge();
  }

  /** Purges expired records every `purgeIntervalSeconds`; the timer never keeps the process alive. */
  private schedulePurge(): void {
    if (this.purgeIntervalSeconds === false) return;
    this.purgeTimer = setInterval(() => {
      this.idempotency
        .purgeExpired()
        .catch((error: unknown) => this.logger.error(`Purging expired records failed: ${error}`));
    }, this.purgeIntervalSeconds * 1000);
    this.purgeTimer.unref();
  }

  /**
   * A store that cannot work refuses the start; one that cannot be reached now (the database restarting) may be
   * reached later, and its requests are answered 503 meanwhile, so that is only a warning.
   */
  private async checkStoreSchema(): Promise<void> {
    try {
      await this.store.checkSchema?.();
    } catch (error) {
      if (error instanceof IdempotencySetupError) throw error;
      this.logger.warn(
        `Could not check the idempotency store at start-up: ${error instanceof Error ? error.message : error}`,
      );
    }
  }

  /**
   * Closes the store after the drain: begun here if nothing began it earlier (an application context that serves no
   * transport's server; a transport whose server closes with the application begins it first).
   */
  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.purgeTimer);
    await this.idempotency.drain();
    await this.store.close?.();
  }
}
