import { randomUUID } from 'node:crypto';
import type { EntityManager, MigrationInterface, QueryRunner } from 'typeorm';

/** The charges table of the bench apps (ours in `bench-app.ts`, the peer's in `peer-app.ts`): one table, one insert. */
export class CreateBenchCharges1764633600002 implements MigrationInterface {
  name = 'CreateBenchCharges1764633600002';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      'CREATE TABLE bench_charges (id text PRIMARY KEY, amount integer NOT NULL, created timestamptz NOT NULL DEFAULT now())',
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE bench_charges');
  }
}

export interface ChargeBody {
  amount: number;
}

/** The charge insert that every bench route guards (or not, for the baseline). */
export async function insertCharge(manager: EntityManager, { amount }: ChargeBody) {
  const [charge] = await manager.query<{ id: string; amount: number }[]>(
    'INSERT INTO bench_charges (id, amount) VALUES ($1, $2) RETURNING id, amount',
    [`ch_${randomUUID()}`, amount],
  );
  return charge;
}
