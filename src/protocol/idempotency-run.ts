import { createHash } from 'node:crypto';
import type { IdempotencyClaim, IdempotencyScope, StoreTransaction } from './idempotency-store.interface.js';

/**
 * One claimed attempt at an idempotent operation: what its handler may know of it. Read it through
 * `IdempotencyContext` while the handler runs.
 */
export class IdempotencyRun {
  constructor(
    readonly claim: IdempotencyClaim,
    /** True when this attempt took the key over from one whose lease lapsed (it may have done part of the work). */
    readonly takeover: boolean,
    /** The transaction of a transactional route, in which the outcome is stored. */
    readonly transaction?: StoreTransaction,
  ) {}

  get scope(): IdempotencyScope {
    return this.claim.scope;
  }

  get key(): string {
    return this.claim.scope.key;
  }

  /**
   * A key for a call this operation makes to another service (`deriveKey('provider')`): the same for every
   * attempt at this operation, different for each purpose and scope, so that a call repeated after a crash
   * is deduplicated downstream.
   */
  deriveKey(purpose: string): string {
    const { account, endpoint, key } = this.claim.scope;
    return createHash('sha256')
      .update(JSON.stringify([account, endpoint, key, purpose]))
      .digest('base64url');
  }
}
