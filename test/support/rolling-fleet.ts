import { once } from 'node:events';
import http from 'node:http';
import { availableParallelism } from 'node:os';
import { type SpawnedApp, spawnTypeScriptServer } from './sample-app.js';

/**
 * A fleet of `test/support/rolling-app.ts` instances on one store, which a rolling deploy replaces one at a time,
 * and the client of a load balancer in front of them: requests go round robin to the instances that listen, and one
 * whose connection is refused or reset before any byte of an answer (an instance on its way out) goes again, with
 * the same key, to another instance.
 */

/** The table the instances write a row to for each run of their handler, by key, with the pid of the instance. */
export const ROLLING_WORK_LOG = 'CREATE TABLE work_log (id serial PRIMARY KEY, key text NOT NULL, pid int NOT NULL)';

/** An instance, from the moment it listens. */
export interface FleetInstance {
  url: string;
  pid: number;
  /** Everything it printed so far, stdout and stderr. */
  output(): string;
  /** How its process ended, once it has. */
  exit?: { code: number | null; signal: NodeJS.Signals | null };
}

/** An answer of an instance to `POST /work`. */
export interface WorkAnswer {
  status: number;
  retryAfter: string | undefined;
  replay: boolean;
  body: string;
  /** The instance that answered. */
  url: string;
}

/** What the client did: requests sent (each try counted), and those retried elsewhere after a transport error. */
export interface ClientCounts {
  requests: number;
  /** Connections refused: nothing listened on the instance's port any more. */
  refused: number;
  /** Connections reset (or closed) before any byte of an answer: the instance closed them on its way out. */
  reset: number;
}

export interface RollingFleetOptions {
  size: number;
  /** The instances' environment (`STORE`, `DATABASE_URL`, ...). */
  env: Record<string, string>;
  /** How long a stopped instance may take to exit: past it, `roll()` fails. Default: 20 s (its drain is 10 s). */
  exitWithinMs?: number;
  /** How long a request may go unanswered: past it, `post()` fails. Default: 15 s (a wait for a key is 5 s). */
  answerWithinMs?: number;
}

/** Tries of one request on successive instances, each refused or reset, before `post()` gives up. */
const TRANSPORT_TRIES = 10;

/** A transport error before any byte of an answer, which a load balancer retries on another instance. */
class TransportError extends Error {
  constructor(
    readonly kind: 'refused' | 'reset',
    cause: Error,
  ) {
    super(`${kind}: ${cause.message}`, { cause });
  }
}

export class RollingFleet {
  /** The instances that listen, oldest first: the round robin's, and the roll's order. */
  private readonly listening: FleetInstance[] = [];
  /** Every instance the fleet started, those gone included (their outputs and exits). */
  readonly started: FleetInstance[] = [];
  readonly counts: ClientCounts = { requests: 0, refused: 0, reset: 0 };
  private readonly processes = new Map<FleetInstance, SpawnedApp>();
  private turn = 0;

  private constructor(private readonly options: RollingFleetOptions) {}

  /** Starts `size` instances, as many at once as there are cores (they compile their TypeScript as they start). */
  static async start(options: RollingFleetOptions): Promise<RollingFleet> {
    const fleet = new RollingFleet(options);
    try {
      let left = options.size;
      const starter = async () => {
        while (left > 0) {
          left -= 1;
          await fleet.startInstance();
        }
      };
      await Promise.all(Array.from({ length: Math.min(options.size, availableParallelism()) }, starter));
    } catch (error) {
      await fleet.stop();
      throw error;
    }
    return fleet;
  }

  /** The instances listening now. */
  get instances(): readonly FleetInstance[] {
    return [...this.listening];
  }

  /**
   * A rolling deploy: each instance of the fleet in turn gets SIGTERM while its replacement starts; the next goes
   * once it has exited (within `exitWithinMs`) and the replacement listens. The stopped one takes requests until it
   * exits, as behind a load balancer that has not seen it go yet: it refuses them or closes their connections then.
   * `onStopping` is called with each instance as it gets SIGTERM.
   */
  async roll({ onStopping }: { onStopping?: (instance: FleetInstance) => void } = {}): Promise<void> {
    for (const instance of [...this.listening]) {
      const exitWithinMs = this.options.exitWithinMs ?? 20_000;
      const { child } = this.processes.get(instance) as SpawnedApp;
      const exited = once(child, 'exit', { signal: AbortSignal.timeout(exitWithinMs) }).catch(() => {
        throw new Error(
          `instance ${instance.pid} did not exit within ${exitWithinMs} ms of SIGTERM:\n${instance.output()}`,
        );
      });
      child.kill('SIGTERM');
      onStopping?.(instance);
      // Both awaited to their end, so that neither's failure is left unhandled.
      const [exit, start] = await Promise.allSettled([exited, this.startInstance()]);
      for (const step of [exit, start]) if (step.status === 'rejected') throw step.reason;
    }
  }

  /**
   * `POST /work` with `key` as Idempotency-Key, to `to` or else the next instance in turn; refused or reset before
   * any answer, it goes to the next instance (up to `TRANSPORT_TRIES` tries). Fails on any other error: no answer
   * within `answerWithinMs`, or an answer cut short.
   */
  async post(key: string, to?: FleetInstance): Promise<WorkAnswer> {
    let instance = to ?? this.next();
    for (let tries = 1; ; tries += 1) {
      this.counts.requests += 1;
      try {
        return await postWork(instance.url, key, this.options.answerWithinMs ?? 15_000);
      } catch (error) {
        if (!(error instanceof TransportError) || tries === TRANSPORT_TRIES) throw error;
        this.counts[error.kind] += 1;
        instance = this.next(instance);
      }
    }
  }

  /** Ends (SIGKILL) every instance still running. */
  async stop(): Promise<void> {
    await Promise.all([...this.processes.values()].map((app) => app.close()));
  }

  /** The next listening instance in turn, other than `not` (where a request was just refused). */
  private next(not?: FleetInstance): FleetInstance {
    const candidates = this.listening.filter((instance) => instance !== not);
    if (candidates.length === 0) throw new Error('no instance of the fleet listens');
    this.turn = (this.turn + 1) % candidates.length;
    return candidates[this.turn];
  }

  private async startInstance(): Promise<void> {
    const app = await spawnTypeScriptServer('test/support/rolling-app.ts', this.options.env);
    const instance: FleetInstance = { url: app.url, pid: app.child.pid as number, output: () => app.output() };
    this.processes.set(instance, app);
    this.started.push(instance);
    this.listening.push(instance);
    app.child.once('exit', (code, signal) => {
      instance.exit = { code, signal };
      this.listening.splice(this.listening.indexOf(instance), 1);
    });
  }
}

/** One `POST /work`, on a connection of its own (an instance that stops closes its idle keep-alive connections). */
function postWork(url: string, key: string, answerWithinMs: number): Promise<WorkAnswer> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${url}/work`, {
      method: 'POST',
      agent: false,
      headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' },
    });
    const timer = setTimeout(
      () => request.destroy(new Error(`${url} did not answer ${key} within ${answerWithinMs} ms`)),
      answerWithinMs,
    );
    let answering = false;
    request.once('response', (response) => {
      answering = true;
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.once('close', () => {
        clearTimeout(timer);
        if (!response.complete) {
          reject(new Error(`${url} cut its answer to ${key} short (status ${response.statusCode})`));
          return;
        }
        const retryAfter = response.headers['retry-after'];
        resolve({
          status: response.statusCode as number,
          retryAfter,
          replay: response.headers['idempotent-replay'] === 'true',
          body: Buffer.concat(chunks).toString(),
          url,
        });
      });
    });
    // Before the response's headers: refused, or reset by an instance that closed the connection on its way out.
    request.on('error', (error: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (answering) reject(error);
      else if (error.code === 'ECONNREFUSED') reject(new TransportError('refused', error));
      else if (error.code === 'ECONNRESET' || error.code === 'EPIPE') reject(new TransportError('reset', error));
      else reject(error);
    });
    request.end('{}');
  });
}
