import { connect, createServer, type Socket } from 'node:net';
import { madeBeforeAll } from './made-before-all.js';

/**
 * A TCP proxy in front of a server of the test's (the database, the app), to take it away and give it back,
 * or to lose a response on the wire. While down, every connection is cut and new ones closed as they open; while
 * black-holed, nothing passes either way and nothing is refused (a network that drops packets): connections hang,
 * and carry what was sent meanwhile once it heals.
 */
export class TcpProxy {
  private readonly sockets = new Set<Socket>();
  private down = false;
  private refusing = false;
  private blackHoled = false;
  /** Connections opened while black-holed, connected to the server once it heals. */
  private readonly waiting: Array<() => void> = [];
  private dropNext = false;
  /** Round trips sent through the proxy: PostgreSQL `Query` and `Sync` messages from its clients. */
  roundTrips = 0;
  private readonly server = createServer((client) => {
    if (this.down || this.refusing) {
      client.destroy();
      return;
    }
    if (this.blackHoled) {
      client.pause();
      this.sockets.add(client);
      client.on('close', () => this.sockets.delete(client));
      client.on('error', () => undefined);
      this.waiting.push(() => this.forward(client));
      return;
    }
    this.forward(client);
  });

  private forward(client: Socket): void {
    if (client.destroyed) return;
    const upstream = connect(this.targetPort, this.targetHost);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('close', () => this.sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    client.pipe(upstream);
    client.on('data', countMessages(this));
    if (this.dropNext) {
      // The request goes through; the first bytes of the answer cut the client off instead of reaching it.
      this.dropNext = false;
      upstream.once('data', () => client.destroy());
    } else {
      upstream.pipe(client);
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    if (this.blackHoled) for (const socket of [client, upstream]) socket.pause();
  }

  private constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** A proxy to the server of `url`. */
  static async to(url: string): Promise<TcpProxy> {
    const target = new URL(url);
    const proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string {
    const address = this.server.address();
    if (typeof address !== 'object' || !address) throw new Error('the proxy is not listening');
    const proxied = new URL(url);
    proxied.hostname = '127.0.0.1';
    proxied.port = String(address.port);
    return proxied.toString();
  }

  /** The next connection's request is delivered, and its response lost on the way back. */
  dropNextResponse(): void {
    this.dropNext = true;
  }

  /** The database becomes unreachable: open connections are cut, new ones closed at once. */
  takeDown(): void {
    this.down = true;
    for (const socket of this.sockets) socket.destroy();
  }

  /** New connections are closed at once; those open go on (a server at its `max_connections`). */
  refuseNewConnections(): void {
    this.refusing = true;
  }

  /** Nothing passes any more, either way, and nothing is refused: open connections and new ones hang. */
  blackHole(): void {
    this.blackHoled = true;
    for (const socket of this.sockets) socket.pause();
  }

  /** Taken down: accepts connections again. Black-holed: heals, and what waited passes. */
  bringUp(): void {
    this.down = false;
    this.refusing = false;
    if (!this.blackHoled) return;
    this.blackHoled = false;
    for (const socket of this.sockets) socket.resume();
    for (const connect of this.waiting.splice(0)) connect();
  }

  async close(): Promise<void> {
    this.takeDown();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A proxy to the server of `target` (the test file's database) for the block's tests, closed after them. */
export function useTcpProxy(target: { url: string }): TcpProxy {
  return madeBeforeAll(
    () => TcpProxy.to(target.url),
    (proxy) => proxy.close(),
  );
}

/**
 * Reads a PostgreSQL client's messages as they pass and counts its round trips: a simple `Query` ('Q') or
 * an extended-protocol batch ending in `Sync` ('S'). The first message of a connection (startup, SSL request)
 * has no type byte.
 */
function countMessages(proxy: TcpProxy): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  let started = false;
  return (chunk) => {
    pending = Buffer.concat([pending, chunk]);
    for (;;) {
      const header = started ? 5 : 4;
      if (pending.length < header) return;
      const length = started ? pending.readInt32BE(1) + 1 : pending.readInt32BE(0);
      if (pending.length < length) return;
      if (started && (pending[0] === 0x51 || pending[0] === 0x53)) proxy.roundTrips += 1;
      // An SSL request is answered with one byte and followed by the real startup message.
      if (!started && pending.readInt32BE(4) !== 80877103) started = true;
      pending = pending.subarray(length);
    }
  };
}
