import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity({ name: 'charges' })
export class Charge {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column({ type: 'text' })
  account!: string;

  @Column({ type: 'integer' })
  amount!: number;

  @Column({ type: 'text' })
  currency!: string;

  @Column({ type: 'text', nullable: true })
  description!: string | null;

  @Column({ type: 'text' })
  status!: 'pending' | 'succeeded';

  @Column({ name: 'provider_charge_id', type: 'text', nullable: true })
  providerChargeId!: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt!: Date;
}
