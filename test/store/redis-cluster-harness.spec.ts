import { once } from 'node:events';
import { connect } from 'node:net';
import type { Cluster } from 'ioredis';
import { redisCluster } from '../support/redis.js';
import { useRedisCluster } from '../support/redis-cluster.js';
import { describeWith } from '../support/required-service.js';

/**
 * The harness the Redis store's suites run on: a local cluster of three masters with a replica each, whose masters
 * a test hands over (`failover()`) or restarts, and which its clients follow.
 */
describeWith(redisCluster, 'a local Redis Cluster', () => {
  const cluster = useRedisCluster({ masters: 3, replicasPerMaster: 1 });
  const keys = Array.from({ length: 24 }, (_, index) => `harness:${index}`);
  let client: Cluster;

  beforeAll(async () => {
    client = cluster.newClient();
    for (const key of keys) await client.set(key, `value of ${key}`);
  });

  const valuesRead = () => Promise.all(keys.map((key) => client.get(key)));
  const valuesWritten = keys.map((key) => `value of ${key}`);

  it('has three masters, each with a replica, and serves keys from every master', async () => {
    const nodes = await cluster.nodes();
    const masters = nodes.filter(({ role }) => role === 'master').map(({ port }) => port);
    expect(masters).toEqual(cluster.startupNodes.map(({ port }) => port).sort((a, b) => a - b));
    expect(nodes.filter(({ role }) => role === 'replica').map(({ masterPort }) => masterPort)).toEqual(
      expect.arrayContaining(masters),
    );
    expect(nodes).toHaveLength(6);
    expect(new Set(await Promise.all(keys.map((key) => cluster.masterOf(key))))).toEqual(new Set(masters));
    expect(await valuesRead()).toEqual(valuesWritten);
  });

  it("failover() hands a master's slots to its replica, the values kept", async () => {
    const before = await cluster.masterOf(keys[0]);
    const promoted = await cluster.failover(before);
    expect(promoted).not.toBe(before);
    expect(await cluster.masterOf(keys[0])).toBe(promoted);
    expect(await cluster.nodes()).toContainEqual({ port: before, role: 'replica', masterPort: promoted });
    expect(await valuesRead()).toEqual(valuesWritten);
    await client.set(keys[0], 'written after the failover');
    expect(await client.get(keys[0])).toBe('written after the failover');
    await client.set(keys[0], valuesWritten[0]);
  });

  it('restart() of a master has its replica take over, and brings it back as that replica', async () => {
    const master = await cluster.masterOf(keys[1]);
    await cluster.restart(master);
    const promoted = await cluster.masterOf(keys[1]);
    expect(promoted).not.toBe(master);
    expect(await cluster.nodes()).toContainEqual({ port: master, role: 'replica', masterPort: promoted });
    expect(await valuesRead()).toEqual(valuesWritten);
    await client.set(keys[1], 'written after the restart');
    expect(await client.get(keys[1])).toBe('written after the restart');
    await client.set(keys[1], valuesWritten[1]);
  });

  it('restart() of a replica, killed, brings it back as the replica of the same master', async () => {
    const before = await cluster.nodes();
    const replica = before.find(({ role }) => role === 'replica')!;
    await cluster.restart(replica.port, { signal: 'SIGKILL' });
    expect(await cluster.nodes()).toEqual(before);
    expect(await valuesRead()).toEqual(valuesWritten);
  });

  it('stop() closes its clients and ends every node', async () => {
    const ports = (await cluster.nodes()).map(({ port }) => port);
    const clientEnded = once(client, 'end');
    await cluster.stop();
    await clientEnded;
    expect(await Promise.all(ports.map(refused))).toEqual(ports.map(() => true));
  });
});

/** Whether a connection to `port` of the loopback interface is refused: nothing listens there. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}
