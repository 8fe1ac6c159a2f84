import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'refunds' })
export class Refund {
  @PrimaryColumn({ type: 'text' })
  id: string;

  @Column({ type: 'text' })
  account: string;

  @Column({ name: 'charge_id', type: 'text' })
  chargeId: string;

  @Column({ type: 'integer' })
  amount: number;

  @CreateDateColumn({ type: 'timestamptz', default: () => 'clock_timestamp()' })
  created: Date;
}

export function presentRefund(refund: Refund) {
  return { id: refund.id, object: 'refund' as const, charge: refund.chargeId, amount: refund.amount };
}
