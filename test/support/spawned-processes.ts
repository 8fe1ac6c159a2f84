import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';

/** Every child process the tests of this file spawned that has not exited yet. */
const running = new Set<ChildProcess>();

/** Keeps `child` until it exits, so that `stopSpawnedProcesses()` can end it whatever its test's outcome. */
export function trackSpawnedProcess(child: ChildProcess): void {
  running.add(child);
  child.once('exit', () => running.delete(child));
}

/** Ends (SIGKILL) a child process unless it has exited, and waits for its exit. */
export async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGKILL');
  await exited;
}

/**
 * Ends every child process still running. Run after each test file (`test/support/after-each-file.ts`): a test that
 * failed before it stopped its processes would otherwise leave them serving, and Jest waiting for their pipes.
 */
export async function stopSpawnedProcesses(): Promise<void> {
  await Promise.all([...running].map(stopProcess));
}
