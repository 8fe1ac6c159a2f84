import { createHash } from 'node:crypto';
import { canonicalJson } from '../shared/canonical-json.js';
import { describedValue } from './described-value.js';
import { IdempotencyOperationInvalidError, type KeyTerms } from './idempotency.errors.js';
import type { IdempotencyScope, StoredResponse } from './idempotency-store.interface.js';
import { assertFaithfulJson } from './json-input.js';
import type { JsonResult } from './jsonified.js';
import { keyFault, scopeTextFault } from './scope-values.js';

// `IdempotencyService.execute()`'s operations: what one is, how it is scoped and fingerprinted, and its result as
// stored (its JSON, which every replay parses back).

/** An operation no transport serves (a cron run, a workflow step, a script) and its key. */
export interface IdempotentOperation {
  /** What the operation is, e.g. `payout`: keys are scoped by it, like a transport's keys by endpoint. Not empty. */
  name: string;
  /**
   * The operation's key: created once where the intent is formed, and persisted with it. 1..255 visible ASCII
   * characters, as a transport's key.
   */
  key: string;
  /** The tenant, as for a transport's calls (not empty). Default: none. */
  account?: string;
  /**
   * What the operation does: the same key with another input is refused. Plain objects, arrays, strings, finite
   * numbers, booleans and null only (a Date as its ISO string, say), so that different inputs never look alike. Default: none.
   */
  input?: unknown;
}

export interface ExecuteResult<T> {
  /**
   * The work's result as stored, through JSON (a `Date` comes back a string, nothing comes back `null`): the same on
   * the first run and on every replay.
   */
  result: JsonResult<T>;
  /** The work ran in an earlier call; this one returned its stored result. */
  replayed: boolean;
}

/**
 * The scope an operation is claimed under, `(account, "operation <name>", key)`. Its parts follow the rules a
 * transport's do, so that what the database would refuse (a key too long for its column, a NUL character) is refused here,
 * for good, rather than failing each claim as if the database were down, which a retrying job would retry for ever.
 */
export function scopeOfOperation({ name, key, account }: IdempotentOperation): IdempotencyScope {
  checkOperationPart('name', name, scopeTextFault);
  checkOperationPart('key', key, keyFault);
  if (account !== undefined) checkOperationPart('account', account, scopeTextFault);
  return { account: account ?? '', endpoint: operationEndpoint(name), key };
}

/** The endpoint an operation's records are scoped by: `operation <name>`. */
export function operationEndpoint(name: string): string {
  return `operation ${name}`;
}

function checkOperationPart(
  field: IdempotencyOperationInvalidError['field'],
  value: unknown,
  faultOf: (text: string) => string | undefined,
): void {
  const fault = typeof value === 'string' ? faultOf(value) : `it is ${describedValue(value)}, not a string`;
  if (fault !== undefined) throw new IdempotencyOperationInvalidError(field, fault);
}

/**
 * The fingerprint of an operation's input: its canonical JSON, hashed. An input JSON cannot represent faithfully is
 * refused first (a `TypeError` naming where), before anything is claimed.
 */
export function operationFingerprint(input: unknown): string {
  assertFaithfulJson(input ?? null, 'input');
  return createHash('sha256')
    .update(canonicalJson(input ?? null))
    .digest('hex');
}

/** How refusals name an operation's key and what it was used with. */
export function operationTerms(name: string): KeyTerms {
  return { key: `key of operation ${JSON.stringify(name)}`, usedWith: 'input' };
}

/** The result of an operation's work as stored: its JSON (`null` for nothing). */
export function storedResult(value: unknown): StoredResponse {
  const json = JSON.stringify(value ?? null) as string | undefined;
  // A function or a symbol has no JSON at all: refused in words, rather than by Buffer.from(undefined).
  if (json === undefined)
    throw new TypeError(`An operation's result must be JSON, and ${describedValue(value)} has none`);
  return { status: 200, headers: { 'content-type': 'application/json' }, body: Buffer.from(json) };
}

/** A stored result, as every call of the operation returns it. */
export function resultOf<T>(stored: StoredResponse): JsonResult<T> {
  return JSON.parse(stored.body.toString('utf8')) as JsonResult<T>;
}
