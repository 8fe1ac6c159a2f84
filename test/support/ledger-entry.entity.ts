import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/** A row a handler writes under its request's key: how many there are tells how many times its work committed. */
@Entity({ name: 'ledger_entries' })
export class LedgerEntry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  key!: string;
}
