import { createHash } from 'node:crypto';
import type { DataSource, QueryRunner } from 'typeorm';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import { quoteIdentifier } from './postgres-identifiers.js';
import type { TransactionSlots } from './transaction-slots.js';

/**
 * One LISTEN connection per store, shared by every waiting attempt (no connection per waiter), opened on
 * the first wait. A lost connection is opened again by the next wait; waiters it leaves behind time out.
 * While it is open it holds one of the transaction slots, so that it never takes a connection kept free.
 */
export class ChangeListener {
  private readonly waiters = new Map<string, Set<() => void>>();
  private connection?: Promise<{ runner: QueryRunner; freeSlot(): void }>;

  constructor(
    private readonly dataSource: DataSource,
    private readonly channel: string,
    private readonly slots: TransactionSlots,
  ) {}

  wait(digest: string, timeoutMs: number): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    let wake!: () => void;
    const changed = new Promise<void>((resolve) => (wake = resolve));
    const timer = setTimeout(() => done(), timeoutMs);
    const done = () => {
      clearTimeout(timer);
      this.waiters.get(digest)?.delete(done);
      if (this.waiters.get(digest)?.size === 0) this.waiters.delete(digest);
      wake();
    };
    if (!this.waiters.has(digest)) this.waiters.set(digest, new Set());
    this.waiters.get(digest)?.add(done);
    // Without a listener (none could be opened before the waiter's timeout), the waiter still ends at its timeout.
    const listening = Promise.race([this.listen(timeoutMs), changed]).then(
      () => undefined,
      () => undefined,
    );
    return { changed, listening, cancel: done };
  }

  async close(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    const listening = await connection?.catch(() => undefined);
    if (!listening) return;
    try {
      await listening.runner.query('UNLISTEN *').catch(() => undefined); // the connection goes back to the pool
      await listening.runner.release();
    } finally {
      listening.freeSlot();
    }
  }

  /** Opens the listening connection, waiting at most `timeoutMs` for its slot. */
  private listen(timeoutMs: number): Promise<unknown> {
    this.connection ??= (async () => {
      // With a single transaction slot (a pool of three or fewer), the listener takes a connection kept free
      // instead: holding that slot would leave transactional routes none at all.
      let slotHeld = this.slots.capacity > 1;
      if (slotHeld) await this.slots.acquire(timeoutMs);
      const freeSlot = () => {
        if (slotHeld) this.slots.release();
        slotHeld = false;
      };
      try {
        const runner = this.dataSource.createQueryRunner();
        const client = (await runner.connect()) as import('pg').PoolClient;
        const lost = () => {
          if (this.connection === connection) this.connection = undefined;
          freeSlot();
        };
        client.on('notification', (message) => {
          for (const waiter of [...(this.waiters.get(message.payload ?? '') ?? [])]) waiter();
        });
        client.on('error', lost);
        client.on('end', lost);
        await runner.query(`LISTEN ${quoteIdentifier(this.channel)}`);
        return { runner, freeSlot };
      } catch (error) {
        freeSlot();
        throw error;
      }
    })();
    const connection = this.connection;
    connection.catch(() => {
      if (this.connection === connection) this.connection = undefined;
    });
    return connection;
  }
}

/** The payload of a change notification: short, and the same on every instance. */
export function scopeDigest(scope: IdempotencyScope): string {
  return createHash('md5').update(`${scope.account}\n${scope.endpoint}\n${scope.key}`).digest('hex');
}
