import { Column, CreateDateColumn, Entity, Index } from 'typeorm';
import { MoneyMovement } from '../money-movement.entity.js';

@Entity({ name: 'charges' })
@Index('charges_account_created_idx', ['account', 'created'])
export class Charge extends MoneyMovement {
  @Column({ type: 'text' })
  status: string;

  @Column({ type: 'text', nullable: true })
  description: string | null;

  @Column({ type: 'text', nullable: true })
  source: string | null;

  @Column({ name: 'provider_charge_id', type: 'text', nullable: true })
  providerChargeId: string | null;

  @Column({ name: 'amount_refunded', type: 'integer', default: 0 })
  amountRefunded: number;

  @CreateDateColumn({ type: 'timestamptz', default: () => 'clock_timestamp()' })
  created: Date;
}

/** The public representation of a charge. */
export function presentCharge(charge: Charge) {
  return {
    id: charge.id,
    object: 'charge' as const,
    amount: charge.amount,
    currency: charge.currency,
    status: charge.status,
    description: charge.description,
    created: Math.floor(charge.created.getTime() / 1000),
  };
}
