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
  /** Work the process already holds (a consumer's message): claimed during the drain too, until its wait is over. */
  inHand: boolean;
}

/**
 * Work a transport holds besides its running attempts, which the drain waits for too: a message consumer's messages
 * in hand (delivered and not yet settled), which it runs rather than give back, so that none spends a delivery.
 */
export interface DrainParticipant {
  /** How much is in hand now, for the drain's log. */
  readonly inHand: number;
  /** The drain has begun: take no more work (a consumer stops taking messages from its broker). */
  stopTaking(): void;
  /** Resolves once nothing is in hand. */
  idle(): Promise<void>;
  /** The drain's wait is over: what is still in hand and not yet running goes back (to another instance). */
  giveBack(): void;
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
 * claims are refused once it has begun (but those of work in hand), running attempts and the work in hand get
 * `timeoutSeconds` to finish and store their outcomes, and those still running then are abandoned (by `abandon`:
 * their claims released, their clients answered 503), the work in hand not yet running given back.
 */
export class RunningAttempts {
  private readonly attempts = new Map<IdempotencyRun, RunningAttempt>();
  /** Attempts whose claim is made and whose run is being started (waiting for a transaction slot, say). */
  private starting = 0;
  /** Resolves the drain's wait once the last running attempt has finished. */
  private idle?: () => void;
  private draining?: Promise<void>;
  /** The drain's wait is over: every claim is refused, work in hand too. */
  private closing = false;
  private readonly participants: DrainParticipant[] = [];

  constructor(
    private readonly logger: Logger,
    /** How long the drain waits for running attempts (`shutdownTimeoutSeconds`). */
    readonly timeoutSeconds: number,
  ) {}

  /** Whether the drain has begun: new claims are refused from then on. */
  get drainBegun(): boolean {
    return this.draining !== undefined;
  }

  /** Whether a claim is refused as shutting down: any once the drain has begun, one of work in hand once its wait is over. */
  refuses(inHand: boolean): boolean {
    return inHand ? this.closing : this.drainBegun;
  }

  /** Adds work the drain waits for besides the running attempts. */
  addParticipant(participant: DrainParticipant): void {
    this.participants.push(participant);
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
    for (const participant of this.participants) participant.stopTaking();
    const inHand = this.participants.reduce((sum, participant) => sum + participant.inHand, 0);
    if (this.active() > 0 || inHand > 0) {
      this.logger.log(
        `Shutting down: waiting up to ${timeoutSeconds} s for ${this.active()} running idempotent attempt(s)` +
          (inHand > 0 ? ` and ${inHand} message(s) in hand.` : '.'),
      );
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        this.settled(),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutSeconds * 1000))),
      ]);
      clearTimeout(timer);
    }
    this.closing = true;
    for (const participant of this.participants) participant.giveBack();
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

  /** Resolves once the work in hand is done and no attempt is left running (work in hand starts attempts). */
  private async settled(): Promise<void> {
    await Promise.all(this.participants.map((participant) => participant.idle()));
    if (this.active() > 0) await new Promise<void>((resolve) => (this.idle = resolve));
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
