import { AsyncLocalStorage } from 'node:async_hooks';
import type { IdempotencyRun } from './idempotency-run.js';

/** What the storage holds for a handler the module runs without a claim (a message without a key, where allowed). */
const UNGUARDED = Symbol('UNGUARDED');
const runs = new AsyncLocalStorage<IdempotencyRun | typeof UNGUARDED>();

/** Runs `work` as part of `run`: code it calls, however deep, finds the run with `currentRun()`. */
export function runWithin<T>(run: IdempotencyRun, work: () => T): T {
  return runs.run(run, work);
}

/** Runs `work` as a handler the module runs without a claim: `currentRun()` is `undefined` in it. */
export function runUnguarded<T>(work: () => T): T {
  return runs.run(UNGUARDED, work);
}

/** The run the code running now is part of, or `undefined` outside one. */
export function currentRun(): IdempotencyRun | undefined {
  const run = runs.getStore();
  return run === UNGUARDED ? undefined : run;
}

/** Whether the code running now is a handler the module runs, under a claim (`runWithin`) or not (`runUnguarded`). */
export function runByTheModule(): boolean {
  return runs.getStore() !== undefined;
}
