import type { ModulesContainer } from '@nestjs/core';
import type { IdempotencyService } from '../protocol/idempotency.service.js';

/** Marks a server whose `close()` drains first, so that two consumer transports wrap it once. */
const DRAINS_FIRST = Symbol('DRAINS_FIRST');

type ClosingServer = { close(): unknown; [DRAINS_FIRST]?: true };

/**
 * Makes each microservice server of the application drain the module before it closes. `app.close()` on a standalone
 * microservice closes its server first, and runs the lifecycle hooks (where the drain is) only after: the channel
 * would close under the messages in hand, giving each back (a delivery of its limit), and their acknowledgements would
 * fail. Nest lists every server it creates, a hybrid application's too; the drain runs once, whoever begins it.
 */
export function drainBeforeServersClose(modules: ModulesContainer, idempotency: IdempotencyService): void {
  modules.getRpcTargetRegistry().subscribe((target) => {
    const server = target as ClosingServer;
    if (typeof server.close !== 'function' || server[DRAINS_FIRST]) return;
    const close = server.close.bind(server);
    server[DRAINS_FIRST] = true;
    server.close = async () => {
      await idempotency.drain();
      return close();
    };
  });
}
