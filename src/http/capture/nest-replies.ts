import type { AbstractHttpAdapter } from '@nestjs/core';

/** Responses Nest is writing right now through its platform's `reply`: a handler's value, an exception filter's answer. */
const nestReplying = new WeakSet<object>();
const REPLIES_TRACKED = Symbol('idempotency.repliesTracked');

/** Marks the responses Nest writes, so that a response a handler writes itself (passthrough) is told apart. */
export function trackNestReplies(adapter: AbstractHttpAdapter & { [REPLIES_TRACKED]?: true }): void {
  if (adapter[REPLIES_TRACKED]) return;
  adapter[REPLIES_TRACKED] = true;
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called with .call(this) by the wrapper below
  const reply = adapter.reply;
  adapter.reply = function replyTracked(this: AbstractHttpAdapter, response: object, ...rest: unknown[]) {
    nestReplying.add(response);
    try {
      return (reply as (...args: unknown[]) => unknown).call(this, response, ...rest);
    } finally {
      nestReplying.delete(response);
    }
  };
}

/** Whether Nest itself is writing `response` (the platform's response object) right now. */
export function isNestReplying(response: object): boolean {
  return nestReplying.has(response);
}
