import type { MigrationInterface, QueryRunner } from 'typeorm';

export class CreateCharges1767000000000 implements MigrationInterface {
  name = 'CreateCharges1767000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE charges (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        account text NOT NULL,
        amount integer NOT NULL,
        currency text NOT NULL,
        description text,
        status text NOT NULL,
        provider_charge_id text,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`CREATE INDEX charges_account_idx ON charges (account)`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE charges`);
  }
}
