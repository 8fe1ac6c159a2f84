/** Who may collide with whom: one record per (account, endpoint, key), never a global key. */
export interface IdempotencyScope {
  account: string;
  /** Method and route template, e.g. `POST /v1/charges/:id/refunds`. */
  endpoint: string;
  key: string;
}

/** A response as it was sent: replayed byte for byte. */
export interface StoredResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: Buffer;
}

/** The record that held the scope when a claim did not win it. */
export type ExistingRecord =
  | { status: 'in_progress'; fingerprint: string }
  | { status: 'completed'; fingerprint: string; response: StoredResponse };

export type ClaimResult = { claimed: true } | { claimed: false; existing: ExistingRecord };

export interface ClaimTiming {
  /** The claim blocks other attempts this long. */
  leaseSeconds: number;
  /** An abandoned claim (never completed, never retried) expires this long after its lease. */
  ttlSeconds: number;
}

/** The claim an attempt holds; only its holder (same `attempt` token) may complete or release it. */
export interface IdempotencyClaim {
  scope: IdempotencyScope;
  attempt: string;
}

/** Storage of idempotency records. Every time comparison is made on the store's clock. */
export interface IdempotencyStore {
  /**
   * Atomically claims the scope for `attempt`: inserts a new in-progress record, or takes over one that
   * has expired or whose lease has lapsed (same fingerprint only). The claim is committed when this resolves.
   */
  claim(scope: IdempotencyScope, fingerprint: string, attempt: string, timing: ClaimTiming): Promise<ClaimResult>;
  /** Stores the outcome; false when the claim is no longer held by this attempt. */
  complete(claim: IdempotencyClaim, response: StoredResponse, ttlSeconds: number): Promise<boolean>;
  /** Deletes the in-progress record so that a retry runs again; false when the claim is no longer held. */
  release(claim: IdempotencyClaim): Promise<boolean>;
  /** Deletes at most `batchSize` expired records; returns how many it deleted. */
  purgeExpired(batchSize: number): Promise<number>;
}
