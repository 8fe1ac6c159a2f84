import { BATCH_LOCK_TIMEOUT_MS } from './batch-connections.js';

/** How long a record found held by another transaction has its claims refused without a statement. */
const HELD_MEMORY_MS = 1000;
/** At most this many records remembered at once: past it, the oldest are forgotten first. */
const HELD_MEMORY_ENTRIES = 10_000;

/**
 * A claim refused because its record is held by another transaction (a row lock waited for past the batches' bound,
 * moments ago). It has the code of PostgreSQL's lock timeout, which it stands for.
 */
export class RecordHeldError extends Error {
  readonly code = '55P03';

  constructor() {
    super(
      `The idempotency record is locked by another transaction (waited for past ${BATCH_LOCK_TIMEOUT_MS} ms); retry later`,
    );
  }
}

/**
 * The records a batch found held by another transaction (`lockedRecords`), remembered for a moment: a claim of one
 * is refused at once, rather than make each batch it joins wait its 500 ms again while clients retry.
 */
export class HeldRecords {
  private readonly until = new Map<string, number>();

  constructor(private readonly clock: () => number = () => performance.now()) {}

  remember(keys: string[]): void {
    const until = this.clock() + HELD_MEMORY_MS;
    for (const key of keys) {
      this.until.delete(key); // kept in the order they were last found held
      this.until.set(key, until);
    }
    for (const [key, expiry] of this.until) {
      if (this.until.size <= HELD_MEMORY_ENTRIES && expiry > this.clock()) break;
      this.until.delete(key);
    }
  }

  holds(key: string): boolean {
    const until = this.until.get(key);
    if (until === undefined) return false;
    if (until > this.clock()) return true;
    this.until.delete(key);
    return false;
  }
}
