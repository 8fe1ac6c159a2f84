import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity('payouts')
export class Payout {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ type: 'text' })
  account!: string;

  @Column({ type: 'int' })
  amount!: number;
}
