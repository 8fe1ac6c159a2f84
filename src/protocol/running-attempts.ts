import type { Logger } from '@nestjs/common';
import type { IdempotencyError, KeyTerms } from './idempotency.errors.js';
import type { IdempotencyPolicy } from './idempotency-policy.js';
import type { IdempotencyRun } from './idempotency-run.js';
import type { Instant } from './replay-cache.js';
import { withTimeout } from './store-bounds.js';

/** What a run was claimed for: its request's fingerprint, when its claim was sent, and how refusals name its key. */
export interface ClaimedRequest {
  fingerprint: string;
  since: Instant;
  terms: KeyTerms;
}

/** An attempt between its claim and its finish: what it was claimed for, and how shutdown sees it. */
export interface RunningAttempt extends ClaimedRequest {
  policy: IdempotencyPolicy;
  /** Ended by shutdown before its handler was done: its claim is released, its outcome not stored. */
  abandoned: boolean;
  /** Its handler is done and its outcome is being written. */
  finishing: boolean;
  /** Answers the attempt's client when shutdown ends it (set by the transport). */
  onAbandoned?: (error: IdempotencyError) => void;
}

/**
 * The attempts of this process between their claim and their finish, and graceful shutdown's drain of them: new
 * claims are refused once it has begun, running attempts get `timeoutSeconds` to finish and store their outcomes,
 * and those still running then are abandoned (by `abandon`: their claims released, their clients answered 503).
 */
export class RunningAttempts {
  private readonly attempts = new Map<IdempotencyRun, RunningAttempt>();
  /** Attempts whose claim is made and whose run is being started (waiting for a transaction slot, say). */
  private starting = 0;
  /** Resolves the drain's wait once the last running attempt has finished. */
  private idle?: () => void;
  private draining?: Promise<void>;

  constructor(
    private readonly logger: Logger,
    /** How long the drain waits for running attempts (`shutdownTimeoutSeconds`). */
    readonly timeoutSeconds: number,
  ) {}

  /** Whether the drain has begun: new claims are refused from then on. */
  get drainBegun(): boolean {
    return this.draining !== undefined;
  }

  get(run: IdempotencyRun): RunningAttempt | undefined {
    return this.attempts.get(run);
  }

  /** Counts a run being started, so that the drain waits for it too, until `start` gives it (or fails). */
  async starts(start: () => Promise<IdempotencyRun>, request: ClaimedRequest, policy: IdempotencyPolicy) {
    this.starting += 1;
    try {
      const run = await start();
      this.attempts.set(run, { ...request, policy, abandoned: false, finishing: false });
      return run;
    } finally {
      this.starting -= 1;
      this.notifyIfIdle();
    }
  }

  /** The attempt of `run` is over: its outcome is written, or it was abandoned. */
  ended(run: IdempotencyRun): void {
    this.attempts.delete(run);
    this.notifyIfIdle();
  }

  /** Registers how the attempt's client is answered if shutdown ends the attempt before its handler is done. */
  onAbandoned(run: IdempotencyRun, answer: (error: IdempotencyError) => void): void {
    const attempt = this.attempts.get(run);
    if (attempt) attempt.onAbandoned = answer;
  }

  /** The drain, once: later calls await the same. */
  drain(abandon: (run: IdempotencyRun, attempt: RunningAttempt) => Promise<void>): Promise<void> {
    this.draining ??= this.drainOnce(abandon);
    return this.draining;
  }

  private async drainOnce(abandon: (run: IdempotencyRun, attempt: RunningAttempt) => Promise<void>): Promise<void> {
    const { timeoutSeconds } = this;
    if (this.active() > 0) {
      this.logger.log(
        `Shutting down: waiting up to ${timeoutSeconds} s for ${this.active()} running idempotent attempt(s).`,
      );
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => (this.idle = resolve)),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutSeconds * 1000))),
      ]);
      clearTimeout(timer);
    }
    const finishing = new Promise<void>((resolve) => (this.idle = resolve));
    await Promise.all(
      [...this.attempts]
        .filter(([, attempt]) => !attempt.finishing)
        .map(([run, attempt]) => {
          attempt.abandoned = true;
          return abandon(run, attempt);
        }),
    );
    // Outcomes being written (each store operation bounded by storeTimeoutSeconds) keep the database open until
    // they are written, for at most another timeoutSeconds.
    if (this.active() > 0) {
      await withTimeout(finishing, { storeTimeoutSeconds: timeoutSeconds }, 'writing outcomes').catch(() => undefined);
    }
  }

  /** Attempts whose outcome is still to be written (abandoned ones have none). */
  private active(): number {
    let count = this.starting;
    for (const attempt of this.attempts.values()) if (!attempt.abandoned) count += 1;
    return count;
  }

  private notifyIfIdle(): void {
    if (this.active() === 0) this.idle?.();
  }
}
