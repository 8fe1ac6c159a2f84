import type { Socket } from 'node:net';

/** A request of either platform (Express's, Fastify's): both tell their socket. */
type RequestWithSocket = { socket: Socket };

/** A gate a handler waits at until the test opens it; it also tells when the handler's client has gone. */
export class Gate {
  private open!: () => void;
  private arrived!: () => void;
  private gone!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  readonly reached = new Promise<void>((resolve) => (this.arrived = resolve));
  readonly clientGone = new Promise<void>((resolve) => (this.gone = resolve));

  async pass(request?: RequestWithSocket): Promise<void> {
    request?.socket.once('close', () => this.gone());
    this.arrived();
    await this.opened;
  }

  release(): void {
    this.open();
  }
}

/**
 * Gates handed out one request at a time: `holdNext()` makes the gate that the next request to a gated route
 * waits at (`pass()`); requests that find none pass straight through.
 */
export class GateQueue {
  private next?: Gate;
  private readonly made: Gate[] = [];

  holdNext(): Gate {
    this.next = new Gate();
    this.made.push(this.next);
    return this.next;
  }

  pass(request?: RequestWithSocket): Promise<void> | undefined {
    const gate = this.next;
    this.next = undefined;
    return gate?.pass(request);
  }

  /** Opens every gate made, so that a failed test leaves no handler waiting (the server cannot close before it answers). */
  releaseAll(): void {
    for (const gate of this.made) gate.release();
  }
}
