import { Column, CreateDateColumn, Entity } from 'typeorm';
import { MoneyMovement } from '../money-movement.entity.js';

/** A payout to make, by the background worker. Its idempotency key is created with it and kept with it. */
@Entity({ name: 'payout_jobs' })
export class PayoutJob extends MoneyMovement {
  @Column({ type: 'text' })
  status: 'pending' | 'paid';

  /** Persisted with the job, so that a worker restarted after a crash retries with the same key. */
  @Column({ name: 'idempotency_key', type: 'text' })
  idempotencyKey: string;

  @Column({ name: 'provider_payout_id', type: 'text', nullable: true })
  providerPayoutId: string | null;

  @CreateDateColumn({ type: 'timestamptz', default: () => 'clock_timestamp()' })
  created: Date;

  @Column({ name: 'paid_at', type: 'timestamptz', nullable: true })
  paidAt: Date | null;
}

export function presentPayout(job: PayoutJob) {
  return { id: job.id, object: 'payout' as const, amount: job.amount, currency: job.currency, status: job.status };
}
