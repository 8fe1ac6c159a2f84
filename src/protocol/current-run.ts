import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyRun } from './idempotency-run.js';

const runs = new AsyncLocalStorage<IdempotencyRun>();

/** Runs `work` as part of `run`: code it calls, however deep, finds the run with `currentRun()`. */
export function runWithin<T>(run: IdempotencyRun, work: () => T): T {
  return runs.run(run, work);
}

/** The run the code running now is part of, or `undefined` outside one. */
export function currentRun(): IdempotencyRun | undefined {
  return runs.getStore();
}
