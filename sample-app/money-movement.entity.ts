import { Column, PrimaryColumn } from 'typeorm';

/** The columns every movement of an account's money has (charges, payouts). */
export abstract class MoneyMovement {
  @PrimaryColumn({ type: 'text' })
  id: string;

  @Column({ type: 'text' })
  account: string;

  @Column({ type: 'integer' })
  amount: number;

  @Column({ type: 'varchar', length: 3 })
  currency: string;
}
