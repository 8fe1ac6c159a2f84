import type { ClientBase, ClientConfig, PoolClient, QueryConfig } from 'pg';
import type { DataSource } from 'typeorm';
import type { IdempotencyScope } from '../protocol/idempotency-store.interface.js';
import { within } from '../protocol/store-bounds.js';
import { quoteIdentifier } from './postgres-identifiers.js';
import { type ScopeWait, ScopeWaits, scopeDigest } from '../store-kit/scope-waits.js';
import type { TransactionSlots } from './transaction-slots.js';
import type { ClientClass } from './transaction-pooler.js';

/** The session LISTEN runs on: its client, what to do when it is lost, and how to give it back. */
export interface ListeningSession {
  client: ClientBase;
  /** The connection was lost: give back what it held (it is not closed again). */
  lost(): void;
  close(): Promise<void>;
}

/** Opens the session LISTEN runs on, waiting at most `timeoutMs` for what it needs. */
export type OpenListeningSession = (timeoutMs: number) => Promise<ListeningSession>;

/**
 * One LISTEN connection per store, shared by every waiting attempt (no connection per waiter), opened on
 * the first wait. A lost connection is opened again by the next wait; waiters it leaves behind time out.
 */
export class ChangeListener {
  private readonly waits = new ScopeWaits<ScopeWait & { wake(): void }>();
  private connection?: Promise<ListeningSession>;
  /** A wait has asked for the connection: from then on, until `close()`, health checks expect it. */
  private needed = false;
  private closed = false;

  constructor(
    private readonly channel: string,
    private readonly open: OpenListeningSession,
  ) {}

  wait(
    scope: IdempotencyScope,
    timeoutMs: number,
  ): { changed: Promise<void>; listening: Promise<void>; cancel(): void } {
    this.needed = true;
    const { changed, cancel } = this.waits.start(scopeDigest(scope), timeoutMs, (control) => ({ wake: control.end }));
    // Without a listener (none could be opened before the waiter's timeout), the waiter still ends at its timeout.
    const listening = Promise.race([this.listen(timeoutMs), changed]).then(
      () => undefined,
      () => undefined,
    );
    return { changed, listening, cancel };
  }

  /**
   * Whether it listens, told within `timeoutMs`: a lost connection is opened again, as the next wait would open it,
   * and an open one is asked to LISTEN again (a no-op for PostgreSQL): a connection cut without its client knowing
   * (a network gone silent) does not answer. `undefined` when nothing needs it: no wait has asked for it and the
   * caller does not say waits are on (`needed`). Closed (the application is shutting down), it no longer listens,
   * and is not opened again: waits that need it would wait out their bound, so it is not listening.
   */
  async isListening(timeoutMs: number, needed: boolean): Promise<boolean | undefined> {
    if (!(this.needed || needed)) return undefined;
    if (this.closed) return false;
    const deadline = Date.now() + timeoutMs;
    try {
      const session = await within(this.listen(timeoutMs), timeoutMs, () => new Error('not listening in time'));
      // pg's read timeout; 0 would be none.
      const query_timeout = Math.max(1, deadline - Date.now());
      await session.client.query({ text: this.listenStatement(), query_timeout } as QueryConfig);
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const connection = this.connection;
    this.connection = undefined;
    const listening = await connection?.catch(() => undefined);
    await listening?.close();
  }

  /** Opens the listening connection, waiting at most `timeoutMs` for it. */
  private listen(timeoutMs: number): Promise<ListeningSession> {
    this.connection ??= (async () => {
      const session = await this.open(timeoutMs);
      try {
        const lost = () => {
          if (this.connection === connection) this.connection = undefined;
          session.lost();
        };
        session.client.on('notification', (message) => {
          for (const wait of this.waits.on(message.payload ?? '')) wait.wake();
        });
        session.client.on('error', lost);
        session.client.on('end', lost);
        await session.client.query(this.listenStatement());
        return session;
      } catch (error) {
        await session.close().catch(() => undefined);
        throw error;
      }
    })();
    const connection = this.connection;
    connection.catch(() => {
      if (this.connection === connection) this.connection = undefined;
    });
    return connection;
  }

  private listenStatement(): string {
    return `LISTEN ${quoteIdentifier(this.channel)}`;
  }
}

/**
 * LISTEN on a pooled connection of the data source. While it is open it holds one of the transaction slots, so that
 * it never takes a connection kept free; with a single slot (a pool of three or fewer), it takes a connection kept
 * free instead: holding that slot would leave transactional routes none at all.
 */
export function dataSourceSession(dataSource: DataSource, slots: TransactionSlots): OpenListeningSession {
  return async (timeoutMs) => {
    let slotHeld = slots.capacity > 1;
    if (slotHeld) await slots.acquire(timeoutMs);
    const freeSlot = () => {
      if (slotHeld) slots.release();
      slotHeld = false;
    };
    try {
      const runner = dataSource.createQueryRunner();
      const client = (await runner.connect()) as PoolClient;
      return {
        client,
        lost: freeSlot,
        close: async () => {
          try {
            await runner.query('UNLISTEN *').catch(() => undefined); // the connection goes back to the pool
            await runner.release();
          } finally {
            freeSlot();
          }
        },
      };
    } catch (error) {
      freeSlot();
      throw error;
    }
  };
}

/** LISTEN on a connection of its own (`listenConnection`), outside the data source's pool. */
export function ownSession(Client: () => ClientClass, config: ClientConfig): OpenListeningSession {
  return async () => {
    const client = new (Client())(config);
    // Errors after the connection is up are the listener's; one while connecting rejects `connect()`.
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    return { client, lost: () => undefined, close: () => client.end() };
  };
}
