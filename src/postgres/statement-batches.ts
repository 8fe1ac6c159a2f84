interface Waiting<Item, Answer> {
  item: Item;
  resolve: (answer: Answer) => void;
  reject: (error: unknown) => void;
}

/**
 * Statements that many requests make at the same moment, sent together (group commit): an item submitted while
 * `maxInFlight` batches are in flight waits for one of them to return, and goes out with every item that arrived
 * meanwhile, up to `maxBatchSize`. An item submitted when fewer are in flight goes out at once, alone: no timer, no
 * latency added at low load. A batch holds one item per key (the same record twice in one statement would be one
 * row changed twice); the next item of a key waits for a later batch, its key keeping its place in line. A batch that
 * fails as a whole fails each of its items; `send` may answer some items, fail others, and leave others to finish on
 * their own (the lane is free once its statement is done).
 */
export class StatementBatches<Item, Answer> {
  /** The waiting items of each key, the keys in the order their first waiting item came: a batch costs its own size. */
  private readonly waiting = new Map<string, Waiting<Item, Answer>[]>();
  private inFlight = 0;

  constructor(
    /**
     * Sends one batch: once its statement is done, each item's answer, in the batch's order (an item may still wait
     * for its own, when the batch's items went on one by one).
     */
    private readonly send: (items: Item[]) => Promise<Promise<Answer>[]>,
    /** What a batch holds once at most: items of one key are one record. */
    private readonly keyOf: (item: Item) => string,
    private readonly limits: { maxBatchSize: number; maxInFlight: number },
  ) {}

  submit(item: Item): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const key = this.keyOf(item);
      const line = this.waiting.get(key);
      if (line) line.push({ item, resolve, reject });
      else this.waiting.set(key, [{ item, resolve, reject }]);
      this.sendNext();
    });
  }

  private sendNext(): void {
    while (this.inFlight < this.limits.maxInFlight && this.waiting.size > 0) {
      const batch: Waiting<Item, Answer>[] = [];
      for (const [key, line] of this.waiting) {
        batch.push(line.shift() as Waiting<Item, Answer>);
        if (line.length === 0) this.waiting.delete(key);
        if (batch.length >= this.limits.maxBatchSize) break;
      }
      this.inFlight += 1;
      // A send that throws rather than rejects fails its batch the same way, and never leaves a slot taken.
      void Promise.resolve()
        .then(() => this.send(batch.map(({ item }) => item)))
        .then(
          (answers) => batch.forEach(({ resolve, reject }, index) => void answers[index].then(resolve, reject)),
          (error: unknown) => batch.forEach(({ reject }) => reject(error)),
        )
        .finally(() => {
          this.inFlight -= 1;
          this.sendNext();
        });
    }
  }
}
