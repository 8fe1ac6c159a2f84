import { Column, Entity, Index, PrimaryColumn } from 'typeorm';

/**
 * One idempotency record. The primary key on (account, endpoint, key) is the single-flight lock.
 * The table itself is created by `idempotencyMigrations()` (see migrations/).
 */
@Entity({ name: 'idempotency_records' })
@Index('idempotency_records_expires_at_idx', ['expiresAt'])
@Index('idempotency_records_in_progress_idx', ['endpoint'], { where: "status = 'in_progress' AND attempts > 0" })
export class IdempotencyRecord {
  @PrimaryColumn({ type: 'text', primaryKeyConstraintName: 'idempotency_records_pkey' })
  account: string;

  @PrimaryColumn({ type: 'text', primaryKeyConstraintName: 'idempotency_records_pkey' })
  endpoint: string;

  @PrimaryColumn({
    name: 'idempotency_key',
    type: 'varchar',
    length: 255,
    primaryKeyConstraintName: 'idempotency_records_pkey',
  })
  key: string;

  /** Hex sha256 (by default) of the request that claimed the key. */
  @Column({ type: 'text' })
  fingerprint: string;

  @Column({ type: 'text' })
  status: 'in_progress' | 'completed';

  /** Token of the attempt holding the claim; renew, finalize and release compare on it (fencing). */
  @Column({ type: 'uuid' })
  attempt: string;

  /** How many attempts have held this claim: more than one after a takeover of a lapsed lease. */
  @Column({ type: 'integer', default: 1 })
  attempts: number;

  /** An attempt waits for this record's outcome (`inFlight: 'wait'`): completing or releasing it notifies. */
  @Column({ type: 'boolean', default: false })
  awaited: boolean;

  /**
   * The attempt holding the claim holds the scope's advisory lock while its transaction is open (transactional mode):
   * once that transaction has ended, the same request may take the claim over without waiting for the lease.
   */
  @Column({ name: 'lock_held', type: 'boolean', default: false })
  lockHeld: boolean;

  @Column({ name: 'response_status', type: 'smallint', nullable: true })
  responseStatus: number | null;

  @Column({ name: 'response_headers', type: 'jsonb', nullable: true })
  responseHeaders: Record<string, string | string[]> | null;

  @Column({ name: 'response_body', type: 'bytea', nullable: true })
  responseBody: Buffer | null;

  @Column({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  /** While in progress: until when the claim blocks other attempts. */
  @Column({ name: 'locked_until', type: 'timestamptz', nullable: true })
  lockedUntil: Date | null;

  @Column({ name: 'completed_at', type: 'timestamptz', nullable: true })
  completedAt: Date | null;

  /** When the record counts as absent: completion + TTL, or, for an abandoned claim, lease + TTL. */
  @Column({ name: 'expires_at', type: 'timestamptz' })
  expiresAt: Date;

  /** The steps its attempts completed (recovery points), in order: name, result (JSON text or envelope), when. */
  @Column({ type: 'jsonb', nullable: true })
  steps: { name: string; result: string; at: string }[] | null;
}
