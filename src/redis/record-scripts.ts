import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/** The application's ioredis client: one Redis (or a Sentinel-managed one), or a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/** What the records' keys (and the store's channel) start with unless the application says (`keyPrefix`). */
export const DEFAULT_KEY_PREFIX = 'idempotency:';

/** The channel the store's waiters listen on, told a record's key when it is completed, released or discarded. */
export function outcomeChannel(keyPrefix: string): string {
  return `${keyPrefix}outcomes`;
}

// One record is one hash, at `<prefix>{<digest of its scope>}`: the braces make the digest its hash tag, so that every
// key a record ever needs stays in one slot of a Redis Cluster. Its fields, short since every record carries them:
//   a, e, k: account, endpoint, key (for the operator's reads); f: fingerprint; s: `in_progress` or `completed`;
//   t: the attempt holding it (once released with steps, a token of the release's own); n: attempts at it; l: end of the lease (ms, Redis's
//   clock; empty once completed); x: expiry (ms; the key's own PEXPIREAT too); w: `1` once awaited; c, u: created,
//   updated (ms);
//   rs, rh, rb: the outcome's status, headers (JSON) and body; p: the steps, a JSON array of `[name, result]` arrays
//   (each one JSON-encoded by the store, so that the scripts append them as text without parsing any; once completed,
//   `[name]` arrays: the results are dropped).
// Every script reads Redis's clock (`TIME`) and touches one key, so it is atomic and single-slot; a record past `x` is
// gone, since its key expires then. On a full server (`noeviction`) Redis refuses a script whose first write is one
// that may grow memory (HSET), and lets the rest of a script through once it has written: so a claim writes with HSET
// first (a full Redis takes no new work), and an outcome, a step, a renewal and a waiter's mark write the key's expiry
// first (PEXPIREAT, never refused), so that work Redis let start is never lost for want of memory: a step's effects
// are done, and a retry without it would do them again.
// ioredis sends a command again when its connection drops before the reply came (`autoResendUnfulfilledCommands`):
// each script answers its resending as it answered the first sending (a claim of its own attempt, an outcome stored,
// a step that is the last one already), but a release (and the operator's discard), whose resending is another
// release of a released claim (0).

const NOW = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
`;

/** Whether the record read into `r` (its `s`, `t` and `x` first) is in progress for the attempt `ARGV[1]`. */
const HELD_BY_ATTEMPT = `r[1] == 'in_progress' and r[2] == ARGV[1] and tonumber(r[3]) > now`;

/**
 * The claim, deciding the four outcomes in one step. ARGV: fingerprint, attempt, lease (ms), ttl (ms), account,
 * endpoint, key. Returns `{'claimed'}`, `{'takeover', steps}` (same fingerprint, lapsed lease; `steps` as `p`, false
 * when none), `{'in_progress', fingerprint}` or `{'completed', fingerprint, status, headers, body, ms left}`; a claim
 * sent again answers `{'claimed' or 'takeover', steps}`.
 */
const CLAIM = `${NOW}
local fingerprint, attempt = ARGV[1], ARGV[2]
local lease_until = now + tonumber(ARGV[3])
local expires = lease_until + tonumber(ARGV[4])
local r = redis.call('HMGET', KEYS[1], 's', 'f', 'l', 'x', 'n', 'rs', 'rh', 'rb', 't', 'p')
if r[1] and tonumber(r[4]) > now then
  if r[1] == 'completed' then return {'completed', r[2], r[6], r[7], r[8], tonumber(r[4]) - now} end
  if r[9] == attempt then return {tonumber(r[5]) == 1 and 'claimed' or 'takeover', r[10]} end
  if r[2] ~= fingerprint or tonumber(r[3]) > now then return {'in_progress', r[2]} end
  redis.call('HSET', KEYS[1], 't', attempt, 'n', tonumber(r[5]) + 1, 'l', lease_until, 'x', expires, 'u', now)
  redis.call('PEXPIREAT', KEYS[1], expires)
  return {'takeover', r[10]}
end
redis.call('HSET', KEYS[1], 'a', ARGV[5], 'e', ARGV[6], 'k', ARGV[7], 'f', fingerprint, 's', 'in_progress',
  't', attempt, 'n', 1, 'l', lease_until, 'x', expires, 'w', '0', 'c', now, 'u', now)
if r[1] then redis.call('HDEL', KEYS[1], 'rs', 'rh', 'rb', 'p') end
redis.call('PEXPIREAT', KEYS[1], expires)
return {'claimed'}
`;

/** The lease renewed by its holder, lapsed or not. ARGV: attempt, lease (ms), ttl (ms). Returns 1, or 0 when not held. */
const RENEW = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 't', 'x')
if not (${HELD_BY_ATTEMPT}) then return 0 end
local lease_until = now + tonumber(ARGV[2])
local expires = lease_until + tonumber(ARGV[3])
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('HSET', KEYS[1], 'l', lease_until, 'x', expires, 'u', now)
return 1
`;

/**
 * The outcome stored by the claim's holder, its TTL counted from now; the waiters told when it was awaited. ARGV:
 * attempt, ttl (ms), status, headers, body, channel, the record's key (the message). Returns 1 (also when this very
 * outcome is stored already: sent again), or 0 when not held.
 */
const COMPLETE = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 't', 'x', 'w', 'rs', 'rh', 'rb', 'p')
if r[1] == 'completed' and r[2] == ARGV[1] and r[5] == ARGV[3] and r[6] == ARGV[4] and r[7] == ARGV[5] then
  return 1
end
if not (${HELD_BY_ATTEMPT}) then return 0 end
local expires = now + tonumber(ARGV[2])
redis.call('PEXPIREAT', KEYS[1], expires)
redis.call('HSET', KEYS[1], 's', 'completed', 'rs', ARGV[3], 'rh', ARGV[4], 'rb', ARGV[5], 'l', '', 'x', expires,
  'u', now)
-- The steps' results are no one's once the outcome is stored: only their names stay, for the operator.
if r[8] then
  local names = {}
  for i, step in ipairs(cjson.decode(r[8])) do names[i] = {step[1]} end
  redis.call('HSET', KEYS[1], 'p', cjson.encode(names))
end
if r[4] == '1' then redis.call('PUBLISH', ARGV[6], ARGV[7]) end
return 1
`;

/**
 * The claim given up by its holder: deleted, or, with steps, kept for the same request with its lease ended, held by
 * a new token no attempt has; the waiters told. ARGV: attempt, channel, key (the message), the new token. Returns 1
 * or 0 (not held).
 */
const RELEASE = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 't', 'x', 'w', 'p')
if not (${HELD_BY_ATTEMPT}) then return 0 end
if r[5] then
  -- HDEL first: a write that never grows memory, so that a full Redis lets the rest through. A token of its own
  -- (ARGV[4]) fences the operator's discard, as on PostgreSQL: an operator who read the record before a retry took it
  -- over and released it again holds a token it no longer has.
  redis.call('HDEL', KEYS[1], 't')
  redis.call('HSET', KEYS[1], 't', ARGV[4], 'l', now, 'w', '0', 'u', now)
else
  redis.call('DEL', KEYS[1])
end
if r[4] == '1' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return 1
`;

/**
 * The operator's release (`RedisIdempotencyOperator`): the record deleted, steps and all, if it is in progress and the
 * attempt (or, released with its steps, the token its release gave it) holds it, its lease live or lapsed; the waiters
 * told. Never a completed record. ARGV: attempt, channel, key (the message). Returns 1 or 0 (not held).
 */
const DISCARD = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 't', 'x', 'w')
if not (${HELD_BY_ATTEMPT}) then return 0 end
redis.call('DEL', KEYS[1])
if r[4] == '1' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return 1
`;

/**
 * A step appended by the claim's holder, its lease lapsed or not. ARGV: attempt, the step as JSON (`[name, result]`).
 * Returns 1 (also when it is the last step already: sent again), or 0 when not held.
 */
const RECORD_STEP = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 't', 'x', 'p')
if not (${HELD_BY_ATTEMPT}) then return 0 end
local steps, step = r[4], ARGV[2]
-- The last step already is this one sent again (names are unique within an operation); the suffix is exactly the last
-- step, since the quotes inside JSON strings are escaped.
if steps and (steps == '[' .. step .. ']' or string.sub(steps, -#step - 2) == ',' .. step .. ']') then return 1 end
redis.call('PEXPIREAT', KEYS[1], r[3])
redis.call('HSET', KEYS[1], 'p', steps and string.sub(steps, 1, -2) .. ',' .. step .. ']' or '[' .. step .. ']',
  'u', now)
return 1
`;

/** Whether the record is in progress with a live lease: `r` read as `s`, `l`, `x`, `w`. */
const LIVE_LEASE = `r[1] == 'in_progress' and tonumber(r[2]) > now and tonumber(r[3]) > now`;

/** The record marked awaited while its lease holds (written once). Returns 1, or 0 when it is not held. */
const MARK_AWAITED = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 'l', 'x', 'w')
if not (${LIVE_LEASE}) then return 0 end
if r[4] ~= '1' then
  redis.call('PEXPIREAT', KEYS[1], r[3])
  redis.call('HSET', KEYS[1], 'w', '1')
end
return 1
`;

/** Whether the record is in progress with a live lease, read only, for waits that poll. Returns 1 or 0. */
const IS_HELD = `${NOW}
local r = redis.call('HMGET', KEYS[1], 's', 'l', 'x')
if ${LIVE_LEASE} then return 1 end
return 0
`;

/**
 * ioredis's Buffer-replying script commands, which every client has and its types omit. Not `callBuffer`: with
 * `enableAutoPipelining`, ioredis 5 loses the command's name on that path and throws (redis/ioredis#1923).
 */
interface ScriptCommands {
  evalshaBuffer(sha: string, keys: 1, key: string, ...args: Array<string | number | Buffer>): Promise<unknown>;
  evalBuffer(source: string, keys: 1, key: string, ...args: Array<string | number | Buffer>): Promise<unknown>;
}

/** A Lua script, sent by its SHA1 (`EVALSHA`) and in full when the server does not have it yet (`NOSCRIPT`). */
export class RecordScript {
  private readonly sha: string;

  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }

  /** Runs on the record's key; bulk replies come back as Buffers (an outcome's body is bytes). */
  async run(client: RedisClient, key: string, args: Array<string | number | Buffer>): Promise<unknown> {
    try {
      return await (client as unknown as ScriptCommands).evalshaBuffer(this.sha, 1, key, ...args);
    } catch (error) {
      // A server that restarted, failed over, or flushed its scripts no longer has it; EVAL loads it again.
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      return (client as unknown as ScriptCommands).evalBuffer(this.source, 1, key, ...args);
    }
  }
}

/** The store's scripts (and its operator's `discard`), each one round trip. */
export const RECORD_SCRIPTS = {
  claim: new RecordScript(CLAIM),
  renew: new RecordScript(RENEW),
  complete: new RecordScript(COMPLETE),
  release: new RecordScript(RELEASE),
  discard: new RecordScript(DISCARD),
  recordStep: new RecordScript(RECORD_STEP),
  markAwaited: new RecordScript(MARK_AWAITED),
  isHeld: new RecordScript(IS_HELD),
};
