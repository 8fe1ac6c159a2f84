import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, type ClusterOptions, Redis } from 'ioredis';
import { madeBeforeAll } from './made-before-all.js';
import { onOneTryConnection } from './redis.js';
import { stopProcess, trackSpawnedProcess } from './spawned-processes.js';
import { waitFor } from './wait-for.js';

const HOST = '127.0.0.1';
const SLOTS = 16_384;
/** A node's cluster bus listens on its port plus this (redis-server's default `cluster-port`). */
const BUS_PORT_OFFSET = 10_000;
/** How long any change of the cluster (its creation, a failover, a node's restart) may take to settle. */
const SETTLE_MS = 30_000;

/** The settings of every node, beside its port and folder. */
const NODE_SETTINGS: Array<[string, string]> = [
  // Cluster mode: the node serves its own slots only, and redirects (MOVED) a command for any other.
  ['cluster-enabled', 'yes'],
  // The node's view of the cluster, in its own folder: a node restarted there rejoins as what it was.
  ['cluster-config-file', 'nodes.conf'],
  // A node silent for 1 s is suspected, and failed once most masters agree: a failover within seconds, not 15 s.
  ['cluster-node-timeout', '1000'],
  // Nothing on disk: a restarted node comes back empty, and has data again only by replicating a master that kept it.
  ['appendonly', 'no'],
  ['save', ''],
  // Loopback only, where protected mode (no clients from elsewhere without a password) has nothing to guard.
  ['bind', HOST],
  ['protected-mode', 'no'],
  // In the foreground: the child process is the server, signalled and awaited as such.
  ['daemonize', 'no'],
  // A replica stands for election however long it was cut off from its master: a failover never waits on data age.
  ['cluster-replica-validity-factor', '0'],
  // A cluster that is down refuses reads too (the default, said here): a test sees CLUSTERDOWN, never a stale read.
  ['cluster-allow-reads-when-down', 'no'],
  // A slot without a master takes the whole cluster down (the default, said here) until a replica takes it over.
  ['cluster-require-full-coverage', 'yes'],
  // Replicas stay with the master they were given: the topology changes only when a test changes it.
  ['cluster-allow-replica-migration', 'no'],
  // A replica's full sync starts at once, rather than after 5 s waiting for more replicas to share it.
  ['repl-diskless-sync-delay', '0'],
];

/**
 * What a client of the harness starts with: a command rides out a failover. A command to a master that went away, or
 * refused while the cluster is down, is tried again every 100 ms with the slots read anew, 100 times (10 s and more):
 * a killed master's replica takes over in 2 to 4 s (`cluster-node-timeout` 1 s). One to a master handed over
 * (`failover()`) is redirected (MOVED) at once. No `slotsRefreshInterval`: ioredis re-arms its timer when a refresh
 * is under way as the client closes, and the test file's process then never ends.
 */
const CLIENT_DEFAULTS: ClusterOptions = {
  // While no node answers, the client tries again every 100 ms rather than backing off to 2 s.
  clusterRetryStrategy: () => 100,
  retryDelayOnFailover: 100,
  retryDelayOnClusterDown: 100,
  maxRedirections: 100,
  // A node that takes the connection and does not answer is passed over soon when the slots are read.
  slotsRefreshTimeout: 500,
  // A connection given up (the slots read from a node that went away, say) is let go at once, rather than held 2 s
  // while it might still close by itself, keeping the test file's process alive that long.
  redisOptions: { connectTimeout: 1_000, disconnectTimeout: 0 },
};

/** A node as the cluster sees it: a master, or a replica and the port of its master. */
export interface RedisClusterNode {
  port: number;
  role: 'master' | 'replica';
  masterPort?: number;
}

/** A Redis Cluster of local `redis-server` processes, each on a free port of 127.0.0.1 with a folder of its own. */
export interface RedisCluster {
  /** The masters the cluster was created with: where a client starts (it learns the other nodes from them). */
  startupNodes: Array<{ host: string; port: number }>;
  /** Every node, as the first node that answers sees it now (all agree once a change of the harness's settled). */
  nodes(): Promise<RedisClusterNode[]>;
  /** An ioredis client of the cluster, with `options` over the harness's defaults; `stop()` closes it if still open. */
  newClient(options?: ClusterOptions): Cluster;
  /** The port of the master that serves `key`'s slot now. */
  masterOf(key: string): Promise<number>;
  /** Has a replica of `masterPort` take over from it (`CLUSTER FAILOVER`); resolves to its port once all agree. */
  failover(masterPort: number): Promise<number>;
  /**
   * Stops the node on `port` (SIGTERM, or `signal`) and starts it again from its folder, once every node is connected
   * and the cluster ok. A master with a replica is started again only after the replica took over, so that it
   * rejoins as its replica with the data; a master without one comes back empty, owning its slots again.
   */
  restart(port: number, options?: { signal?: 'SIGTERM' | 'SIGKILL' }): Promise<void>;
  /** Closes the clients of `newClient()`, kills every node, waits for their exit and removes their folders. */
  stop(): Promise<void>;
}

/** A node of the harness: its port, its folder, and the `redis-server` process serving it now. */
interface LocalNode {
  port: number;
  dir: string;
  server?: ChildProcess;
}

/** A line of `CLUSTER NODES`: the node's id, its port, its flags, its master's id (a replica's), and its slots. */
interface NodeEntry {
  id: string;
  port: number;
  flags: string[];
  masterId?: string;
  linkState: string;
  slots: Array<[number, number]>;
}

/**
 * Starts a cluster of `masters` masters (3 at least, as redis-cli creates no smaller cluster), each with
 * `replicasPerMaster` replicas, and waits until every node agrees that it is ok. Nothing of it is left running if it
 * fails to start.
 */
export async function startRedisCluster({
  masters = 3,
  replicasPerMaster = 1,
}: { masters?: number; replicasPerMaster?: number } = {}): Promise<RedisCluster> {
  const ports = await freeNodePorts(masters * (1 + replicasPerMaster));
  const nodes = new Map<number, LocalNode>();
  const clients = new Set<Cluster>();

  const stop = async () => {
    await Promise.all([...clients].map(disconnectClient));
    await Promise.all(
      [...nodes.values()].map(async ({ server, dir }) => {
        if (server !== undefined) await stopProcess(server);
        await rm(dir, { recursive: true, force: true });
      }),
    );
  };

  try {
    for (const port of ports) nodes.set(port, { port, dir: await mkdtemp(join(tmpdir(), 'idempotency-test-redis-')) });
    await Promise.all(
      [...nodes.values()].map(async (node) => {
        node.server = await startServer(node.port, node.dir);
      }),
    );
    await createCluster(ports, replicasPerMaster);
    await waitUntil('the new cluster to be ok on every node', () => clusterProblem(ports));
  } catch (error) {
    await stop();
    throw error;
  }
  const created = await askAnyNode(ports, readNodes);
  const startupNodes = created.filter(isMaster).map(({ port }) => ({ host: HOST, port }));

  return {
    startupNodes,
    async nodes() {
      const entries = await askAnyNode(ports, readNodes);
      return entries
        .map(({ port, flags, masterId }) => {
          if (!flags.includes('slave')) return { port, role: 'master' as const };
          return { port, role: 'replica' as const, masterPort: entries.find(({ id }) => id === masterId)?.port };
        })
        .sort((a, b) => a.port - b.port);
    },
    newClient(options: ClusterOptions = {}) {
      const client = new Cluster(startupNodes, {
        ...CLIENT_DEFAULTS,
        ...options,
        redisOptions: { ...CLIENT_DEFAULTS.redisOptions, ...options.redisOptions },
      });
      clients.add(client);
      client.once('end', () => clients.delete(client));
      return client;
    },
    async masterOf(key: string) {
      const [slot, entries] = await askAnyNode(ports, async (client) => {
        return [Number(await client.call('CLUSTER', 'KEYSLOT', key)), await readNodes(client)] as const;
      });
      const master = entries.find(
        (entry) => isMaster(entry) && entry.slots.some(([from, to]) => from <= slot && slot <= to),
      );
      if (master === undefined) throw new Error(`no master serves slot ${slot} (of ${key})`);
      return master.port;
    },
    async failover(masterPort: number) {
      const entries = await onNode(masterPort, readNodes);
      const master = entries.find(({ port }) => port === masterPort);
      if (master === undefined || !isMaster(master)) throw new Error(`${HOST}:${masterPort} is not a master`);
      const replica = entries.find(({ masterId, flags }) => masterId === master.id && isWell(flags));
      if (replica === undefined) throw new Error(`${HOST}:${masterPort} has no replica to take over from it`);
      await onNode(replica.port, (client) => client.call('CLUSTER', 'FAILOVER'));
      await waitUntil(`${HOST}:${replica.port} to take over from ${HOST}:${masterPort}, seen by every node`, () =>
        clusterProblem(ports, { master: replica.port }),
      );
      return replica.port;
    },
    async restart(port: number, { signal = 'SIGTERM' }: { signal?: 'SIGTERM' | 'SIGKILL' } = {}) {
      const node = nodes.get(port);
      if (node?.server === undefined) throw new Error(`no node of the cluster on port ${port}`);
      const entries = await onNode(port, readNodes);
      const self = entries.find(({ flags }) => flags.includes('myself')) as NodeEntry;
      const replicated = isMaster(self) && entries.some(({ masterId }) => masterId === self.id);
      const exited = once(node.server, 'exit');
      node.server.kill(signal);
      await exited;
      if (replicated) {
        // Started again before the others failed it, the master would come back empty and still serve its slots.
        const others = ports.filter((other) => other !== port);
        await waitUntil(`the other nodes to fail ${HOST}:${port} and a replica of it to take over`, () =>
          clusterProblem(others, { down: port }),
        );
      }
      node.server = await startServer(port, node.dir);
      await waitUntil(`${HOST}:${port} to rejoin, connected to every node, and the cluster to be ok`, () =>
        clusterProblem(ports),
      );
    },
    stop,
  };
}

/** `startRedisCluster(options)` for the block's tests: started in a `beforeAll`, stopped after them. */
export function useRedisCluster(options?: Parameters<typeof startRedisCluster>[0]): RedisCluster {
  return madeBeforeAll(
    () => startRedisCluster(options),
    (cluster) => cluster.stop(),
  );
}

/** Closes `client` and waits until it has ended: one with connections ends once they closed, one without has none. */
async function disconnectClient(client: Cluster): Promise<void> {
  const ended = client.nodes().length > 0 ? once(client, 'end') : undefined;
  client.disconnect();
  await ended;
}

/**
 * Ports for `count` nodes, each free on the loopback interface with its cluster bus port free too. Every port tried
 * is held until all are found, so that no two nodes get the same one, nor one another's bus port.
 */
async function freeNodePorts(count: number): Promise<number[]> {
  const held: Server[] = [];
  const ports: number[] = [];
  try {
    for (let tries = 0; ports.length < count; tries += 1) {
      if (tries === 100) throw new Error(`no ${count} ports free on ${HOST} with their cluster bus ports`);
      const server = await listen(0);
      held.push(server);
      const { port } = server.address() as AddressInfo;
      const bus =
        port + BUS_PORT_OFFSET <= 65_535 ? await listen(port + BUS_PORT_OFFSET).catch(() => undefined) : undefined;
      if (bus === undefined) continue;
      held.push(bus);
      ports.push(port);
    }
    return ports;
  } finally {
    await Promise.all(held.map((server) => new Promise((resolve) => server.close(resolve))));
  }
}

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer().once('error', reject);
    server.listen(port, HOST, () => resolve(server));
  });
}

/** Settings of `redis-server`, each a directive and its values (`['rename-command', 'SUBSCRIBE', '']`). */
type ServerSettings = Array<[string, ...string[]]>;

/** A `redis-server` of a test's own, not in a cluster: for settings the shared Redis must keep (an eviction policy). */
export interface LocalRedisServer {
  port: number;
  /** `redis://127.0.0.1:<port>`. */
  url: string;
  /** Kills it, waits for its exit and removes its folder. */
  stop(): Promise<void>;
}

/** Starts a `redis-server` on a free port with `settings` (`['maxmemory-policy', 'allkeys-lru']`…), in the foreground. */
export async function startRedisServer(settings: ServerSettings = []): Promise<LocalRedisServer> {
  const [port] = await freeNodePorts(1);
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-test-redis-'));
  const stop = async (server?: ChildProcess) => {
    if (server !== undefined) await stopProcess(server);
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const server = await startServer(port, dir, [
      ['save', ''],
      ['appendonly', 'no'],
      ['bind', HOST],
      ['daemonize', 'no'],
      ...settings,
    ]);
    return { port, url: `redis://${HOST}:${port}`, stop: () => stop(server) };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Starts `redis-server` on `port` with its folder `dir` (its log there), and waits until it answers. */
async function startServer(
  port: number,
  dir: string,
  nodeSettings: ServerSettings = NODE_SETTINGS,
): Promise<ChildProcess> {
  const settings = nodeSettings.flatMap(([name, ...values]) => [`--${name}`, ...values]);
  const logFile = join(dir, 'redis.log');
  const server = spawn('redis-server', ['--port', String(port), '--dir', dir, '--logfile', logFile, ...settings], {
    cwd: dir,
    stdio: 'ignore',
  });
  await once(server, 'spawn'); // rejects with spawn's own error (redis-server missing, say): nothing to track then
  trackSpawnedProcess(server);
  await waitFor(
    async () => {
      if (server.exitCode !== null || server.signalCode !== null) {
        const log = await readFile(logFile, 'utf8').catch(() => '');
        throw new Error(`redis-server on port ${port} exited (${server.exitCode ?? server.signalCode}):\n${log}`);
      }
      return (await onNode(port, (client) => client.ping()).catch(() => undefined)) === 'PONG' ? true : undefined;
    },
    `redis-server on port ${port} to answer`,
    SETTLE_MS,
  );
  return server;
}

/** Joins the nodes on `ports` into one cluster, the first ones masters (redis-cli's choice on one host). */
async function createCluster(ports: number[], replicasPerMaster: number): Promise<void> {
  const addresses = ports.map((port) => `${HOST}:${port}`);
  const args = ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicasPerMaster), '--cluster-yes'];
  try {
    await promisify(execFile)('redis-cli', args, { timeout: SETTLE_MS });
  } catch (error) {
    const { message, stdout } = error as Error & { stdout?: string };
    throw new Error(`redis-cli --cluster create failed: ${message}\n${stdout ?? ''}`, { cause: error });
  }
}

/**
 * What keeps the cluster, as the nodes on `asked` see it, from being settled, or `undefined`: every one of them must
 * say it is ok with all slots served, list every node as connected and well, have its replication link up if it is a
 * replica, and agree with the others on each node's role, master and slots. `master` must be a master in every view;
 * `down` (a node stopped, not asked) must be failed and serve no slot.
 */
async function clusterProblem(
  asked: number[],
  { master, down }: { master?: number; down?: number } = {},
): Promise<string | undefined> {
  const views = new Map<number, string>();
  for (const port of asked) {
    const answer = await onNode(port, async (client) => ({
      info: String(await client.call('CLUSTER', 'INFO')),
      entries: await readNodes(client),
      replication: await client.info('replication'),
    })).catch((error: Error) => error);
    if (answer instanceof Error) return `${HOST}:${port} does not answer: ${answer.message}`;
    const { info, entries, replication } = answer;
    const state = field(info, 'cluster_state');
    if (state !== 'ok') return `${HOST}:${port} says cluster_state:${state}`;
    const served = field(info, 'cluster_slots_ok');
    if (served !== String(SLOTS)) return `${HOST}:${port} says ${served} of the ${SLOTS} slots are served`;
    for (const entry of entries) {
      if (entry.port === down) {
        if (!entry.flags.includes('fail') || entry.slots.length > 0) {
          return `${HOST}:${port} sees ${HOST}:${down}, stopped, as ${entry.flags.join(',')} serving ${entry.slots.length} ranges of slots`;
        }
      } else if (!isWell(entry.flags) || entry.linkState !== 'connected') {
        return `${HOST}:${port} sees ${HOST}:${entry.port} as ${entry.flags.join(',')} (${entry.linkState})`;
      }
    }
    const self = entries.find(({ flags }) => flags.includes('myself')) as NodeEntry;
    if (!isMaster(self) && field(replication, 'master_link_status') !== 'up') {
      return `${HOST}:${port}, a replica, has its link to its master ${field(replication, 'master_link_status')}`;
    }
    if (master !== undefined && !entries.some((entry) => entry.port === master && isMaster(entry))) {
      return `${HOST}:${port} does not see ${HOST}:${master} as a master`;
    }
    views.set(port, describeView(entries));
  }
  const [[firstPort, firstView], ...others] = views;
  const disagreeing = others.find(([, view]) => view !== firstView);
  if (disagreeing !== undefined) {
    return `${HOST}:${firstPort} and ${HOST}:${disagreeing[0]} disagree:\n${firstView}\nand\n${disagreeing[1]}`;
  }
  return undefined;
}

/** What every node must agree on: each node's role, its master (a replica's) and its slots, one node a line. */
function describeView(entries: NodeEntry[]): string {
  const portOf = new Map(entries.map(({ id, port }) => [id, port]));
  return entries
    .map(({ port, flags, masterId, slots }) => {
      const role = isMaster({ flags }) ? 'master' : `replica of ${portOf.get(masterId as string)}`;
      return `${port} ${role} ${slots.map(([from, to]) => `${from}-${to}`).join(' ')}`.trim();
    })
    .sort()
    .join('\n');
}

/** The value of `name` in an INFO-style reply (`name:value` lines). */
function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1].trim();
}

function isMaster({ flags }: Pick<NodeEntry, 'flags'>): boolean {
  return flags.includes('master');
}

/** Neither suspected nor failed, and known by address: a node the cluster counts on. */
function isWell(flags: string[]): boolean {
  return !flags.some((flag) => ['fail', 'fail?', 'handshake', 'noaddr'].includes(flag));
}

async function readNodes(client: Redis): Promise<NodeEntry[]> {
  const text = String(await client.call('CLUSTER', 'NODES'));
  return text
    .trim()
    .split('\n')
    .map((line) => {
      const [id, address, flags, master, , , , linkState, ...slots] = line.split(' ');
      return {
        id,
        port: Number(/:(\d+)@/.exec(address)?.[1]),
        flags: flags.split(','),
        masterId: master === '-' ? undefined : master,
        linkState,
        // A slot being moved is listed as `[slot->-id]` beside its range: the range says who serves it.
        slots: slots
          .filter((range) => !range.startsWith('['))
          .map((range) => {
            const [from, to = from] = range.split('-').map(Number);
            return [from, to] as [number, number];
          }),
      };
    });
}

/**
 * Runs `use` on a connection of its own to the node on `port`, which fails at once rather than retrying: a node
 * stopped, or not yet started, is an answer too.
 */
function onNode<T>(port: number, use: (client: Redis) => Promise<T>): Promise<T> {
  return onOneTryConnection({ host: HOST, port }, { connectTimeout: 1_000, commandTimeout: 2_000 }, use);
}

/** `use` on the first node of `ports` that answers. */
async function askAnyNode<T>(ports: number[], use: (client: Redis) => Promise<T>): Promise<T> {
  const errors: string[] = [];
  for (const port of ports) {
    try {
      return await onNode(port, use);
    } catch (error) {
      errors.push(`${HOST}:${port}: ${(error as Error).message}`);
    }
  }
  throw new Error(`no node of the cluster answers: ${errors.join('; ')}`);
}

/**
 * Waits, for at most `SETTLE_MS`, until `problem` finds none. A timeout names `what` did not happen and the last
 * problem seen; an error of `problem`'s own goes as it is.
 */
async function waitUntil(what: string, problem: () => Promise<string | undefined>): Promise<void> {
  let seen: string | undefined;
  try {
    await waitFor(
      async () => {
        seen = undefined;
        seen = await problem();
        return seen === undefined ? true : undefined;
      },
      what,
      SETTLE_MS,
    );
  } catch (error) {
    if (seen === undefined) throw error;
    throw new Error(`${(error as Error).message}; last seen: ${seen}`, { cause: error });
  }
}
