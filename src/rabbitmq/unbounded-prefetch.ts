import type { Logger } from '@nestjs/common';
import type { ModulesContainer } from '@nestjs/core';
import { ServerRMQ } from '@nestjs/microservices';

/**
 * Warns, once per server, of Nest's RabbitMQ servers that take every message of their queue at once (`prefetchCount`
 * 0, Nest's default). The module holds them and runs `concurrency` at a time, so a backlog loses nothing; but a deploy
 * during it gives back, each counted toward the queue's `x-delivery-limit`, every message the drain could not run
 * within `shutdownTimeoutSeconds`, and a backlog in hand longer than RabbitMQ's `consumer_timeout` makes it close the
 * channel, giving them all back.
 */
export function warnUnboundedPrefetch(modules: ModulesContainer, logger: Logger, concurrency: number): void {
  modules.getRpcTargetRegistry().subscribe((server) => {
    if (!(server instanceof ServerRMQ)) return;
    const { prefetchCount } = (server as unknown as { options: { prefetchCount?: number } }).options;
    if (prefetchCount !== undefined && prefetchCount > 0) return;
    logger.warn(
      "Nest's RabbitMQ server takes every message of its queue at once (prefetchCount 0, Nest's default): a deploy " +
        'during a backlog gives back (each counted toward x-delivery-limit) the messages it holds and cannot run ' +
        `within shutdownTimeoutSeconds. Set prefetchCount near the messages it runs at once (${concurrency}).`,
    );
  });
}
