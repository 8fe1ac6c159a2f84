import { type HttpServer, Injectable, type OnModuleInit } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { IdempotencyService } from '../protocol/idempotency.service.js';

/** The adapter's step that `app.close()` awaits before any shutdown hook; it may return a promise. */
type ClosingAdapter = Pick<HttpServer, 'beforeClose'>;

/**
 * Drains running attempts before Nest destroys the application's providers. `app.close()` (and the signal handler of
 * `app.enableShutdownHooks()`) runs every `onModuleDestroy` first, the root module's before those it imports, so a
 * handler still running would find the clients it uses (a pool, a Redis or queue client) closed under it. The one step
 * before those hooks is the HTTP adapter's `beforeClose()`, which Nest awaits: the drain is chained onto it.
 */
@Injectable()
export class DrainBeforeClose implements OnModuleInit {
  constructor(
    private readonly adapterHost: HttpAdapterHost,
    private readonly idempotency: IdempotencyService,
  ) {}

  /** The adapter is set by then, in tests too (`createNestApplication()` follows the providers' creation). */
  onModuleInit(): void {
    const adapter: ClosingAdapter | undefined = this.adapterHost.httpAdapter;
    if (!adapter) return; // an application context: `IdempotencyService.drain()` is its own to call
    const beforeClose = adapter.beforeClose?.bind(adapter);
    // The adapter's own step first (with `return503OnClosing`, every new request is refused from then on).
    adapter.beforeClose = async () => {
      await beforeClose?.();
      await this.idempotency.drain();
    };
  }
}
