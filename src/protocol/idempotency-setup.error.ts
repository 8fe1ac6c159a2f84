/**
 * A set-up mistake of the application (a missing table, say), found at start-up: the application refuses to start
 * with a message that names the fix, rather than answering its clients as if they were at fault.
 */
export class IdempotencySetupError extends Error {
  override readonly name = 'IdempotencySetupError';
}
