import { createHash } from 'node:crypto';
import type { ExistingRecord } from '../protocol/idempotency-store.interface.js';
import { LOCKED_BY } from './holder-locks.js';
import { quoteTableName } from './postgres-identifiers.js';

/** The store's statements on one table, each one round trip. */
export interface RecordStatements {
  claim: Statement;
  renew: Statement;
  complete: Statement;
  release: Statement;
  /**
   * The operator's release: the record deleted, steps and all, if the attempt holds it in progress (lease lapsed or
   * not), waking its waiters as a release does; never the store's (whose release keeps a record with steps).
   */
  discard: Statement;
  /** A step of the attempt holding the claim, appended to the record's (`recordStep`). */
  recordStep: Statement;
  markAwaited: Statement;
  /** The abandoned records of some endpoints, for the completer (`findAbandoned`). */
  abandoned: Statement;
  purge: Statement;
  /** The same claims, completions and releases of standard attempts, many records in one statement each. */
  claimBatch: Statement;
  completeBatch: Statement;
  releaseBatch: Statement;
  /** The positions (`ord`) of the scopes whose records another transaction holds locked now, found without waiting. */
  lockedRecords: Statement;
}

/** The channel completing or releasing a record of `tableName` notifies; fixed-length: identifiers stop at 63 bytes. */
export function changeChannel(tableName: string): string {
  return `idempotency_${createHash('md5').update(tableName).digest('hex').slice(0, 20)}`;
}

/**
 * Builds the statements on `tableName`; completing or releasing a record someone waits for notifies `channel`.
 * Parameters, in order: account, endpoint, key, then each statement's own (the claim's: fingerprint, attempt, lease,
 * TTL, who holds the scope's lock (`LOCKED_BY`) if the claimer's transaction took it, and that lock's key).
 */
/**
 * Whether the transaction the claimer locked the scope in (its virtual transaction id and backend, `lockedBy`) holds
 * the scope's advisory lock (`lockKey`) when the statement runs; false when `lockedBy` is null.
 */
function heldByItsClaimer(lockedBy: string, lockKey: string): string {
  return `(${lockedBy} IS NOT NULL AND EXISTS (
      SELECT 1 FROM pg_locks
      WHERE locktype = 'advisory' AND granted AND ${LOCKED_BY} = ${lockedBy} AND objsubid = 1
        AND classid = ((${lockKey} >> 32) & 4294967295)::oid AND objid = (${lockKey} & 4294967295)::oid))`;
}

/**
 * The steps a claim of `row` keeps: those of an in-progress record it takes over (its operation resumes from them),
 * none when the record expired or was completed (the operation begins anew).
 */
function stepsKept(row: string): string {
  return `CASE WHEN ${row}.status = 'in_progress' AND ${row}.expires_at > now() THEN ${row}.steps END`;
}

/**
 * A completed record's steps: their names and times, without their results, which no attempt reads any more and
 * which may hold what the outcome's `redact` keeps out of it.
 */
function stepNamesOf(steps: string): string {
  return `(SELECT jsonb_agg(step - 'result') FROM jsonb_array_elements(${steps}) AS step)`;
}

/**
 * A release, as CTEs `deleted` and `kept` (each returning `awaited`, then `returning`): a record without steps is
 * deleted; one with steps stays in progress, its lease ended at once and its attempt replaced, so that the same
 * request takes it over and resumes from its steps, and the released attempt holds it no more. `held` selects the
 * attempt's row as `r`.
 */
function releasing(table: string, held: string, returning: string, using = ''): string {
  return `deleted AS (
      DELETE FROM ${table} AS r ${using ? `USING ${using}` : ''}
      WHERE ${held} AND r.steps IS NULL
      RETURNING r.awaited${returning}
    ),
    kept AS (
      UPDATE ${table} AS r SET locked_until = now(), attempt = gen_random_uuid(), lock_held = false
      ${using ? `FROM ${using}` : ''}
      WHERE ${held} AND r.steps IS NOT NULL
      RETURNING r.awaited${returning}
    )`;
}

export function recordStatements(tableName: string, channel: string): RecordStatements {
  const table = quoteTableName(tableName);
  const scope = 'account = $1 AND endpoint = $2 AND idempotency_key = $3';
  const held = `${scope} AND attempt = $4 AND status = 'in_progress'`;
  // Completing or releasing a claim wakes the attempts waiting for it (delivered when it commits), only when
  // one has asked to be: a NOTIFY serializes every notifying commit of the cluster on one lock.
  const notifying = (statement: string) =>
    countingRows(
      statement,
      `SELECT pg_notify('${channel}', md5($1 || chr(10) || $2 || chr(10) || $3)) WHERE changed.awaited`,
    );

  // The claimer's own transaction holds the scope's advisory lock: checked in pg_locks when the statement runs, by the
  // virtual transaction id and backend the lock was taken in ($8), never by a flag decided before the claim reached
  // the server. A claim can wait (for a pooled connection, on a row lock) past its timeout, when its holder has been
  // rolled back and a retry's holder has the lock: a flag would then still say "held", and take the live retry over.
  // The id is that of one transaction, so neither a later transaction on the same connection nor a lost session passes.
  const heldByClaimer = heldByItsClaimer('$8::text', '$9::bigint');
  // An in-progress record of the same request is free once its lease has lapsed, or once the transaction of a holder
  // that held the scope's advisory lock (lock_held) has ended: the claimer's own transaction holds that lock (taken
  // before this claim), or a probe takes it, for this statement only. The probe runs for lock_held records only: a
  // holder without the lock (standard mode) would look dead to it.
  const takeable = (row: string) =>
    `${row}status = 'in_progress' AND ${row}fingerprint = $4
     AND (${row}locked_until <= now() OR (${row}lock_held AND (${heldByClaimer} OR pg_try_advisory_xact_lock($9::bigint))))`;
  // One statement, one round trip. The record that holds the scope is read first: a replay, a conflict or a
  // reuse is answered from it without writing anything. Otherwise the key is claimed: a new record, or a
  // takeover of an expired one or of a free one of the same request.
  const claim = prepared(`
    WITH current AS (
      SELECT fingerprint, status, response_status, response_headers, response_body,
             extract(epoch FROM expires_at - now())::float8 AS expires_in,
             expires_at > now() AND NOT (${takeable('')}) AS holds
      FROM ${table}
      WHERE ${scope}
    ),
    claimed AS (
      INSERT INTO ${table} AS r (account, endpoint, idempotency_key, fingerprint, status, attempt, attempts,
                                 created_at, locked_until, expires_at, lock_held)
      SELECT $1, $2, $3, $4, 'in_progress', $5::uuid, 1, now(),
             now() + make_interval(secs => $6::float8), now() + make_interval(secs => $6::float8 + $7::float8), ${heldByClaimer}
      WHERE NOT EXISTS (SELECT 1 FROM current WHERE holds)
      ON CONFLICT (account, endpoint, idempotency_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, status = 'in_progress', attempt = EXCLUDED.attempt,
        attempts = CASE WHEN r.status = 'in_progress' THEN r.attempts + 1 ELSE 1 END,
        created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at,
        completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL,
        awaited = r.awaited AND r.status = 'in_progress', lock_held = EXCLUDED.lock_held, steps = ${stepsKept('r')}
      WHERE r.expires_at <= now() OR (${takeable('r.')})
      RETURNING attempts > 1 AS takeover, steps
    )
    SELECT true AS claimed, takeover, NULL::text AS fingerprint, NULL::text AS status,
           NULL::smallint AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body,
           NULL::float8 AS expires_in, steps
    FROM claimed
    UNION ALL
    SELECT false, NULL, fingerprint, status, response_status, response_headers, response_body, expires_in, NULL
    FROM current
    WHERE holds AND NOT EXISTS (SELECT 1 FROM claimed)`);
  const renew = prepared(
    countingRows(`
    UPDATE ${table}
    SET locked_until = now() + make_interval(secs => $5::float8),
        expires_at = now() + make_interval(secs => $5::float8 + $6::float8)
    WHERE ${held}
    RETURNING 1`),
  );
  // The clock at completion, not now(): in a transactional run, now() is when the handler's transaction began,
  // and a TTL counted from there would be shortened by the run (or over before the outcome is even stored).
  // lock_held is cleared: a completed record holds nobody's lock, and a claim of an older build, which does not write
  // the flag, reusing it once expired must not leave a live claim marked as freed by a lock nobody holds.
  const complete = prepared(
    notifying(`
    UPDATE ${table}
    SET status = 'completed', response_status = $5, response_headers = $6, response_body = $7,
        completed_at = completion.at, locked_until = NULL, expires_at = completion.at + make_interval(secs => $8::float8),
        lock_held = false, steps = ${stepNamesOf('steps')}
    FROM (SELECT clock_timestamp() AS at) AS completion
    WHERE ${held}
    RETURNING awaited`),
  );
  const release = prepared(`
    WITH ${releasing(table, held, '')},
    changed AS (SELECT awaited FROM deleted UNION ALL SELECT awaited FROM kept)
    SELECT count(*)::int AS count FROM changed
    LEFT JOIN LATERAL (
      SELECT pg_notify('${channel}', md5($1 || chr(10) || $2 || chr(10) || $3)) WHERE changed.awaited
    ) AS each_row ON true`);
  // The operator's release (IdempotencyOperator): fenced as the store's, but a record with steps is deleted too, so that
  // the next request of the key starts the operation anew. For a record released with its steps, the attempt is the
  // token its release gave it, which the operator read.
  const discard = prepared(notifying(`DELETE FROM ${table} WHERE ${held} RETURNING awaited`));
  // Fenced as an outcome is; a step in the attempt's transaction commits with the step's own writes.
  const recordStep = prepared(
    countingRows(`
    UPDATE ${table}
    SET steps = coalesce(steps, '[]'::jsonb) ||
                jsonb_build_array(jsonb_build_object('name', $5::text, 'result', $6::text, 'at', clock_timestamp()))
    WHERE ${held}
    RETURNING 1`),
  );
  // Only while the lease holds: a lapsed one is for the waiter to take over, not to wait on. A record marked already
  // is not written again, only read: each write is a new version of the row (one an outcome batch that waits for the
  // row cannot see, and sends again alone), and the mark read stands, since the waiter listens before it marks.
  const markAwaited = prepared(`
    WITH marked AS (
      UPDATE ${table} SET awaited = true
      WHERE ${scope} AND status = 'in_progress' AND locked_until > now() AND NOT awaited
      RETURNING 1
    ),
    already AS (
      SELECT 1 FROM ${table} WHERE ${scope} AND status = 'in_progress' AND locked_until > now() AND awaited
    )
    SELECT ((SELECT count(*) FROM marked) + (SELECT count(*) FROM already))::int AS count`);
  // In progress, not expired, its lease ended at least its backoff ago (its doubling stopped at 2^60, past any
  // maxBackoffSeconds, where float8 would overflow after some 1025 attempts). The partial index on in-progress records
  // (`<table>_in_progress_idx`) keeps it off the completed ones, however many the table holds: `attempts > 0`, true of
  // every record, is its predicate's, which this statement alone states.
  const abandoned = prepared(`
    SELECT account, endpoint, idempotency_key AS key, fingerprint, attempts,
           COALESCE(jsonb_path_query_array(steps, '$[*].name'), '[]'::jsonb) AS steps
    FROM ${table}
    WHERE status = 'in_progress' AND attempts > 0 AND endpoint = ANY($1::text[]) AND expires_at > now()
      AND ($2::int IS NULL OR attempts < $2) AND attempts >= $6
      AND locked_until <= now() - make_interval(secs => least($4::float8, $3::float8 * power(2, least(attempts - 1, 60))))
    ORDER BY locked_until LIMIT $5`);
  // SKIP LOCKED keeps the purge off rows a claim is taking over right now. The batch is chosen once (MATERIALIZED): as
  // a subquery, a plan that scans it again for each row of the table deletes a new batch each time, past its LIMIT.
  const purge = prepared(`
    WITH batch AS MATERIALIZED (
      SELECT ctid FROM ${table} WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED
    ),
    changed AS (
      DELETE FROM ${table} WHERE ctid IN (SELECT ctid FROM batch) AND expires_at <= now() RETURNING 1
    )
    SELECT count(*)::int AS count FROM changed`);
  return {
    claim,
    renew,
    complete,
    release,
    discard,
    recordStep,
    markAwaited,
    abandoned,
    purge,
    ...batchStatements(table, channel),
  };
}

/**
 * The statements of a batch (`record-batches.ts`): one row of arrays in, one answer per item out, each tagged with
 * its item's position (`ord`, from 1). Every claim is batched, a transactional attempt's too (its holder
 * transaction's lock checked per item, as by the single claim); outcomes and releases only of attempts without a
 * transaction (an outcome in a transaction commits with it). Claims take their rows in the order of their scopes,
 * as every batch does, so that two batches (of this process or another) never wait for each other in a cycle.
 */
function batchStatements(
  table: string,
  channel: string,
): Pick<RecordStatements, 'claimBatch' | 'completeBatch' | 'releaseBatch' | 'lockedRecords'> {
  const sameScope = (a: string, b: string) =>
    `${a}.account = ${b}.account AND ${a}.endpoint = ${b}.endpoint AND ${a}.idempotency_key = ${b}.idempotency_key`;
  // Each item's record, looked up alone (LATERAL, its LIMIT keeping the planner from making it a join): a join may
  // hash or merge the items with the whole table, the plan chosen when the table's statistics say it is empty or
  // small, which a connection keeps as the table grows. A lookup alone is by the primary key, as long as sequential
  // scans are ruled out (BATCH_SESSION_OPTIONS).
  const recordOf = (i: string, columns: string, where = '', locking = '') =>
    `LATERAL (SELECT ${columns} FROM ${table} r WHERE ${sameScope('r', i)}${where} LIMIT 1${locking})`;
  // As the single claim's, for each item: its claimer's own transaction may hold the scope's lock (a transactional
  // attempt's holder), or a probe takes it for this statement only. The update of a record checks the holder again,
  // in pg_locks, once the row is its: the statement may have waited on another item's row meanwhile, while the
  // claimer's holder ended and a retry's took the lock and the record (`held`, read as the statement began, would
  // take that live record over).
  const takeable = (row: string, fingerprint: string, lockKey: string, held: string) =>
    `${row}.status = 'in_progress' AND ${row}.fingerprint = ${fingerprint}
     AND (${row}.locked_until <= now() OR (${row}.lock_held AND (${held} OR pg_try_advisory_xact_lock(${lockKey}))))`;
  const inputOf = (column: string) => `(SELECT i.${column} FROM input i WHERE ${sameScope('i', 'r')})`;
  const claimBatch = prepared(`
    WITH items AS (
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::uuid[], $6::float8[], $7::float8[],
                           $8::bigint[], $9::text[])
        WITH ORDINALITY AS i(account, endpoint, idempotency_key, fingerprint, attempt, lease, ttl, lock_key, locked_by,
                             ord)
    ),
    input AS (
      SELECT i.*, ${heldByItsClaimer('i.locked_by', 'i.lock_key')} AS held FROM items i
    ),
    current AS (
      SELECT i.ord, r.fingerprint, r.status, r.response_status, r.response_headers, r.response_body,
             extract(epoch FROM r.expires_at - now())::float8 AS expires_in,
             r.expires_at > now() AND NOT (${takeable('r', 'i.fingerprint', 'i.lock_key', 'i.held')}) AS holds
      FROM input i CROSS JOIN ${recordOf('i', 'r.*')} AS r
    ),
    claimed AS (
      INSERT INTO ${table} AS r (account, endpoint, idempotency_key, fingerprint, status, attempt, attempts,
                                 created_at, locked_until, expires_at, lock_held)
      SELECT i.account, i.endpoint, i.idempotency_key, i.fingerprint, 'in_progress', i.attempt, 1, now(),
             now() + make_interval(secs => i.lease), now() + make_interval(secs => i.lease + i.ttl), i.held
      FROM input i
      WHERE NOT EXISTS (SELECT 1 FROM current c WHERE c.ord = i.ord AND c.holds)
      ORDER BY i.account, i.endpoint, i.idempotency_key
      ON CONFLICT (account, endpoint, idempotency_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, status = 'in_progress', attempt = EXCLUDED.attempt,
        attempts = CASE WHEN r.status = 'in_progress' THEN r.attempts + 1 ELSE 1 END,
        created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at,
        completed_at = NULL, response_status = NULL, response_headers = NULL, response_body = NULL,
        awaited = r.awaited AND r.status = 'in_progress', lock_held = EXCLUDED.lock_held, steps = ${stepsKept('r')}
      WHERE r.expires_at <= now()
         OR (${takeable('r', 'EXCLUDED.fingerprint', inputOf('lock_key'), heldByItsClaimer(inputOf('locked_by'), inputOf('lock_key')))})
      RETURNING r.account, r.endpoint, r.idempotency_key, attempts > 1 AS takeover, r.steps
    )
    SELECT i.ord, true AS claimed, c.takeover, NULL::text AS fingerprint, NULL::text AS status,
           NULL::smallint AS response_status, NULL::jsonb AS response_headers, NULL::bytea AS response_body,
           NULL::float8 AS expires_in, c.steps
    FROM claimed c JOIN input i ON ${sameScope('c', 'i')}
    WHERE NOT EXISTS (SELECT 1 FROM current h WHERE h.ord = i.ord AND h.holds)
    UNION ALL
    SELECT c.ord, false, NULL, c.fingerprint, c.status, c.response_status, c.response_headers, c.response_body,
           c.expires_in, NULL
    FROM current c JOIN input i ON i.ord = c.ord
    WHERE c.holds AND NOT EXISTS (SELECT 1 FROM claimed x WHERE ${sameScope('x', 'i')})`);
  // Each changed row notifies the attempts waiting for it, as a single completion or release does. A row locked but
  // not changed is answered `again` (see lockedInOrder).
  const notifyingChanged = (statement: string) => `${statement}
    SELECT changed.ord, false AS again FROM changed
    LEFT JOIN LATERAL (
      SELECT pg_notify('${channel}', md5(changed.account || chr(10) || changed.endpoint || chr(10) ||
                                         changed.idempotency_key))
      WHERE changed.awaited
    ) AS each_row ON true
    UNION ALL
    SELECT l.ord, true FROM locked l WHERE NOT EXISTS (SELECT 1 FROM changed c WHERE c.ord = l.ord)`;
  // The rows the attempts hold, locked in the order of their scopes (as the claims take theirs) before they are
  // changed: a batch that changed them in the order it read them could wait for a claim batch that waits for it.
  // The change then reaches the locked rows by their addresses (ctid), which no plan can turn into a scan of the
  // table. A lock is taken on a row's latest version: one that another statement changed after this one began (a
  // waiter marking it awaited, a renewal of the lease) is not this statement's to see, so its change finds nothing
  // there, and the item is answered `again`, to be sent alone in a statement that sees it.
  const lockedInOrder = (arrays: string, columns: string) => `
    input AS (
      SELECT * FROM unnest(${arrays}) WITH ORDINALITY AS i(${columns})
    ),
    locked AS (
      SELECT i.*, r.row_id
      FROM (SELECT * FROM input ORDER BY account, endpoint, idempotency_key) AS i
      CROSS JOIN ${recordOf('i', 'r.ctid AS row_id', ` AND r.attempt = i.attempt AND r.status = 'in_progress'`, ' FOR UPDATE')} AS r
    )`;
  const held = `r.ctid = l.row_id AND r.attempt = l.attempt AND r.status = 'in_progress'`;
  const completeBatch = prepared(
    notifyingChanged(`WITH ${lockedInOrder(
      '$1::text[], $2::text[], $3::text[], $4::uuid[], $5::smallint[], $6::text[], $7::bytea[], $8::float8[]',
      'account, endpoint, idempotency_key, attempt, response_status, response_headers, response_body, ttl, ord',
    )},
    changed AS (
      UPDATE ${table} AS r
      SET status = 'completed', response_status = l.response_status, response_headers = l.response_headers::jsonb,
          response_body = l.response_body, completed_at = completion.at, locked_until = NULL,
          expires_at = completion.at + make_interval(secs => l.ttl), lock_held = false, steps = ${stepNamesOf('r.steps')}
      FROM locked l, (SELECT clock_timestamp() AS at) AS completion
      WHERE ${held}
      RETURNING l.ord, r.awaited, r.account, r.endpoint, r.idempotency_key
    )`),
  );
  const releaseBatch = prepared(
    notifyingChanged(`WITH ${lockedInOrder(
      '$1::text[], $2::text[], $3::text[], $4::uuid[]',
      'account, endpoint, idempotency_key, attempt, ord',
    )},
    ${releasing(table, held, ', l.ord, r.account, r.endpoint, r.idempotency_key', 'locked l')},
    changed AS (SELECT * FROM deleted UNION ALL SELECT * FROM kept)`),
  );
  // A batch that waited past its bound on a row lock asks which of its records are held, rather than send each of them
  // alone: those are the records that exist but that it cannot lock (SKIP LOCKED never waits). Its locks end with the
  // statement.
  const lockedRecords = prepared(`
    WITH input AS (
      SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS i(account, endpoint, idempotency_key, ord)
    ),
    free AS (
      SELECT i.ord FROM input i CROSS JOIN ${recordOf('i', '1', '', ' FOR UPDATE SKIP LOCKED')} AS r
    )
    SELECT i.ord FROM input i CROSS JOIN ${recordOf('i', '1')} AS r
    WHERE NOT EXISTS (SELECT 1 FROM free f WHERE f.ord = i.ord)`);
  return { claimBatch, completeBatch, releaseBatch, lockedRecords };
}

export interface ClaimRow {
  /** In a batch's answer: the item's position in the batch, from 1. */
  ord?: string;
  claimed: boolean;
  takeover: boolean | null;
  fingerprint: string | null;
  status: 'in_progress' | 'completed' | null;
  response_status: number | null;
  response_headers: Record<string, string | string[]> | null;
  response_body: Buffer | null;
  expires_in: number | null;
  /** The steps of the record a claim won, as the column holds them; `null` when it has none. */
  steps: { name: string; result: string }[] | null;
}

export interface Statement {
  name: string;
  text: string;
}

/** A statement with a name of its own (its text's digest), for PostgreSQL to prepare once per connection. */
export function prepared(text: string): Statement {
  return { name: `idempotency_${createHash('md5').update(text).digest('hex').slice(0, 16)}`, text };
}

/**
 * Wraps a data-modifying statement so that it answers with the number of rows it changed, running `forEachRow`
 * (which may filter itself out) once per changed row.
 */
function countingRows(statement: string, forEachRow?: string): string {
  const each = forEachRow ? ` LEFT JOIN LATERAL (${forEachRow}) AS each_row ON true` : '';
  return `WITH changed AS (${statement}) SELECT count(*)::int AS count FROM changed${each}`;
}

export function toExistingRecord(row: ClaimRow): ExistingRecord {
  if (row.status === 'completed') {
    return {
      status: 'completed',
      fingerprint: row.fingerprint as string,
      response: {
        status: row.response_status as number,
        headers: row.response_headers ?? {},
        body: row.response_body ?? Buffer.alloc(0),
      },
      expiresInSeconds: row.expires_in as number,
    };
  }
  return { status: 'in_progress', fingerprint: row.fingerprint as string };
}

/**
 * Whether the record of a scope is in progress with a live lease (counted: 1 or 0), for the polling of waits behind
 * a transaction pooler. Parameters: account, endpoint, key. Read-only, unlike `markAwaited`'s update: a polled record
 * needs no mark, since nobody is notified.
 */
export function heldRecordStatement(tableName: string): Statement {
  return prepared(`
    SELECT count(*)::int AS count FROM ${quoteTableName(tableName)}
    WHERE account = $1 AND endpoint = $2 AND idempotency_key = $3
      AND status = 'in_progress' AND locked_until > now()`);
}
