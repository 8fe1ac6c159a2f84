import type { RmqOptions } from '@nestjs/microservices';

type RmqServerOptions = NonNullable<RmqOptions['options']>;

/**
 * The consumer's queue: a quorum queue that dead-letters a message rejected by the module (no key, a key reused with
 * another payload) or delivered more than 5 times (a handler that keeps failing) to `<queue>.dead`, which is declared
 * beside it. The module acknowledges messages itself: `noAck: false`.
 */
export function payoutQueue(url: string, queue: string): RmqServerOptions {
  return {
    urls: [url],
    queue,
    noAck: false,
    prefetchCount: 10,
    queueOptions: {
      durable: true,
      arguments: {
        'x-queue-type': 'quorum',
        'x-delivery-limit': 5,
        'x-dead-letter-exchange': '',
        'x-dead-letter-routing-key': `${queue}.dead`,
      },
    },
  };
}
