import type { IncomingMessage } from 'node:http';

/** A gate a handler waits at until the test opens it; it also tells when the handler's client has gone. */
export class Gate {
  private open!: () => void;
  private arrived!: () => void;
  private gone!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  readonly reached = new Promise<void>((resolve) => (this.arrived = resolve));
  readonly clientGone = new Promise<void>((resolve) => (this.gone = resolve));

  async pass(request?: IncomingMessage): Promise<void> {
    request?.socket.once('close', () => this.gone());
    this.arrived();
    await this.opened;
  }

  release(): void {
    this.open();
  }
}
