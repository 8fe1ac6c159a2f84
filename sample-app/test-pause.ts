import { writeSync } from 'node:fs';
import type { PausePoint, SampleConfig } from './sample-config.js';

/**
 * Test-only (`SAMPLE_PAUSE_AT`): at `point`, prints `paused at <point>` and stops the whole process there, event loop
 * included, until it is killed, so that nothing after the point (a commit, an ack, a reply, a lease renewal) can run.
 * The consumer kill tests (test/e2e/consumer-crash.e2e.spec.ts) wait for the line, then SIGKILL the process.
 */
export function pauseIfAt(config: Pick<SampleConfig, 'pauseAt'>, point: PausePoint): void {
  if (config.pauseAt !== point) return;
  // Written synchronously: the process never comes back to flush an asynchronous write.
  writeSync(1, `paused at ${point}\n`);
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}
