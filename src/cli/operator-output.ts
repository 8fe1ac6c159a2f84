import type { OperatorRecord, OperatorReleaseResult } from '../store-kit/operator-records.js';

/** What each state means, said after it in the human output. */
const STATE_MEANINGS: Record<OperatorRecord['state'], string> = {
  running: 'in progress, within its lease',
  'lease-lapsed': 'in progress past its lease: no attempt renews it; the next retry of the same request takes it over',
  'holder-gone':
    "in progress, but its attempt's transaction has ended: the next retry of the same request takes it over",
  completed: 'completed: its outcome is replayed',
  expired: 'past its TTL: free, and purged by the next purge',
};

const RELEASE_MEANINGS: Record<OperatorReleaseResult['outcome'], string> = {
  released: 'Released: the next request with this key runs the handler.',
  'not-found': 'Not released: no record holds this scope (released, expired and purged, or never claimed).',
  completed: 'Not released: the record was completed meanwhile; a completed record is never released.',
  'other-attempt':
    'Not released: another attempt holds the key now (a retry took it over). Inspect it again before releasing.',
};

/** A record as a person reads it: its stored body only when it was read (`--body`), and then said to be there. */
export function describeRecord(record: OperatorRecord, now: Date): string {
  const lines = [
    ['key', record.key],
    ['account', record.account],
    ['endpoint', record.endpoint],
    ['state', `${record.state} (${STATE_MEANINGS[record.state]})`],
    ['attempt', attemptOf(record)],
    ['steps', stepsOf(record.steps)],
    ['holder', holderOf(record)],
    ['created', record.createdAt.toISOString()],
    [
      'lease',
      record.leaseUntil === null
        ? '-'
        : `until ${record.leaseUntil.toISOString()} (${relative(record.leaseUntil, now)})`,
    ],
    ['expires', `${record.expiresAt.toISOString()} (${relative(record.expiresAt, now)})`],
    [
      'stored',
      record.responseStatus === null
        ? '-'
        : `status ${record.responseStatus}, body ${record.bodyBytes ?? 0} bytes${record.body ? '' : ' (not shown; --body shows it)'}`,
    ],
  ].map(([name, value]) => `${name.padEnd(9)}${value}`);
  if (record.body) lines.push('body (shown because --body was given):', record.body.toString('utf8'));
  return lines.join('\n');
}

/** Records as JSON for scripts: dates as ISO strings, a body (if read) in base64. */
export function recordJson(record: OperatorRecord): Record<string, unknown> {
  const { body, ...rest } = record;
  return { ...rest, ...(body === undefined ? {} : { body: body.toString('base64'), bodyEncoding: 'base64' }) };
}

export function describeRelease(result: OperatorReleaseResult): string {
  return RELEASE_MEANINGS[result.outcome];
}

/** Longest list of step names shown whole; a longer one shows its first and last names (the recovery point). */
const STEPS_SHOWN = 10;

function attemptOf(record: OperatorRecord): string {
  return `${record.attempt} (${record.attempts} attempt${record.attempts === 1 ? '' : 's'} so far)`;
}

/** The steps' names in order, the last one the recovery point, and how many: `create-charge, charge-card (2)`. */
function stepsOf(steps: string[]): string {
  if (steps.length === 0) return '-';
  const names = steps.map(stepName);
  const shown =
    names.length <= STEPS_SHOWN ? names : [...names.slice(0, 3), `… ${names.length - 6} more …`, ...names.slice(-3)];
  return `${shown.join(', ')} (${steps.length})`;
}

/**
 * A name as it is, unless it could be misread in the list (a comma, a quote, spaces around it, a control character).
 */
function stepName(name: string): string {
  // eslint-disable-next-line no-control-regex
  return /[,"\u0000-\u001f\u007f]|^\s|\s$/.test(name) ? JSON.stringify(name) : name;
}

function holderOf(record: OperatorRecord): string {
  if (record.status === 'completed') return '-';
  return record.holderTransaction ? "a transaction of the attempt's held the key's lock" : 'none (the lease only)';
}

function relative(at: Date, now: Date): string {
  const seconds = Math.round((at.getTime() - now.getTime()) / 1000);
  const span = Math.abs(seconds);
  const amount = span < 120 ? `${span}s` : span < 7200 ? `${Math.round(span / 60)}m` : `${Math.round(span / 3600)}h`;
  return seconds >= 0 ? `in ${amount}` : `${amount} ago`;
}
