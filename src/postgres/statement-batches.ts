/**
 * Statements that many requests make at the same moment, sent together (group commit): an item submitted while
 * `maxInFlight` batches are in flight waits for one of them to return, and goes out with every item that arrived
 * meanwhile, up to `maxBatchSize`. An item submitted when fewer are in flight goes out at once, alone: no timer, no
 * latency added at low load. A batch holds one item per key (the same record twice in one statement would be one
 * row changed twice); a second item of a key goes out in a later batch. A batch's failure is each of its items'.
 */
export class StatementBatches<Item, Answer> {
  private readonly queue: Array<{ item: Item; resolve: (answer: Answer) => void; reject: (error: unknown) => void }> =
    [];
  private inFlight = 0;

  constructor(
    /** Sends one batch: an answer per item, in the batch's order. */
    private readonly send: (items: Item[]) => Promise<Answer[]>,
    /** What a batch holds once at most: items of one key are one record. */
    private readonly keyOf: (item: Item) => string,
    private readonly limits: { maxBatchSize: number; maxInFlight: number },
  ) {}

  submit(item: Item): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.sendNext();
    });
  }

  private sendNext(): void {
    if (this.inFlight >= this.limits.maxInFlight || this.queue.length === 0) return;
    const batch: typeof this.queue = [];
    const keys = new Set<string>();
    for (let index = 0; index < this.queue.length && batch.length < this.limits.maxBatchSize;) {
      const key = this.keyOf(this.queue[index].item);
      if (keys.has(key)) {
        index += 1;
        continue;
      }
      keys.add(key);
      batch.push(...this.queue.splice(index, 1));
    }
    this.inFlight += 1;
    this.send(batch.map(({ item }) => item))
      .then(
        (answers) => batch.forEach(({ resolve }, index) => resolve(answers[index])),
        (error: unknown) => batch.forEach(({ reject }) => reject(error)),
      )
      .finally(() => {
        this.inFlight -= 1;
        this.sendNext();
      });
    this.sendNext();
  }
}
