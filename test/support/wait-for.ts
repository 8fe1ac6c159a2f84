import { setTimeout as delay } from 'node:timers/promises';

/** Polls `probe` until it returns a value other than undefined, for at most `timeoutMs`. */
export async function waitFor<T>(probe: () => Promise<T | undefined>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await delay(50);
  }
}
