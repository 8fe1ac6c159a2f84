import { type ChildProcess, spawn } from 'node:child_process';
import { trackSpawnedProcess } from '../support/spawned-processes.js';

/**
 * The suite's own hygiene: a child process a test left running (a test that failed before stopping what it spawned)
 * is stopped when its file ends, so that Jest never waits for its pipes. `after-each-file.ts` runs before this file's
 * own `afterAll`.
 */
let left: ChildProcess;

afterAll(() => {
  expect(left.signalCode).toBe('SIGKILL');
});

it('leaves a child process running, as a test that failed half-way would', () => {
  left = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: ['ignore', 'pipe', 'pipe'] });
  trackSpawnedProcess(left);
  expect(left.exitCode).toBeNull();
});
