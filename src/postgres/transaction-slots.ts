/** A counting semaphore: at most `capacity` holders, the others wait in turn. */
export class TransactionSlots {
  private readonly waiting: Array<() => void> = [];
  private free: number;

  constructor(readonly capacity: number) {
    this.free = capacity;
  }

  /** Rejects after `timeoutMs` without a slot; the acquirer then leaves the queue, so it never takes one later. */
  acquire(timeoutMs = Infinity): Promise<void> {
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const granted = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = Number.isFinite(timeoutMs)
        ? setTimeout(() => {
            this.waiting.splice(this.waiting.indexOf(granted), 1);
            reject(new Error(`no connection slot became free within ${timeoutMs} ms`));
          }, timeoutMs)
        : undefined;
      this.waiting.push(granted);
    });
  }

  /** Takes a slot if one is free now; false, taking none, otherwise. */
  tryAcquire(): boolean {
    if (this.free === 0) return false;
    this.free -= 1;
    return true;
  }

  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free += 1;
  }
}
