import { redisServerFaults } from '../../src/redis/index.js';

// What makes a Redis unfit for the records, read from its INFO: the start-up check's pure part (the check itself runs
// against real servers in test/e2e/redis-store.e2e.spec.ts).

const info = (version: string, policy: string) =>
  `# Server\r\nredis_version:${version}\r\nredis_mode:standalone\r\n# Memory\r\nmaxmemory_policy:${policy}\r\n`;

describe('redisServerFaults', () => {
  it('finds nothing wrong with a Redis 5.0 or later that never evicts', () => {
    for (const version of ['5.0.0', '6.2.14', '7.0.15', '8.2.1', '10.0.0']) {
      expect(redisServerFaults(info(version, 'noeviction'))).toEqual([]);
    }
  });

  it('refuses a Redis older than 5.0, whose scripts may not write after reading the clock', () => {
    for (const version of ['4.0.14', '3.2.12']) {
      const [fault] = redisServerFaults(info(version, 'noeviction'));
      expect(fault).toContain(`it runs Redis ${version}`);
      expect(fault).toContain('5.0 or later');
    }
  });

  it('refuses every eviction policy but noeviction, naming the setting to change', () => {
    for (const policy of ['allkeys-lru', 'volatile-lru', 'volatile-ttl', 'allkeys-random', 'volatile-lfu']) {
      const [fault] = redisServerFaults(info('7.0.15', policy));
      expect(fault).toContain(`maxmemory-policy is ${policy}`);
      expect(fault).toContain('maxmemory-policy noeviction');
    }
  });

  it('says every fault at once', () => {
    expect(redisServerFaults(info('4.0.0', 'allkeys-lru'))).toHaveLength(2);
  });
});
