import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The fake mailer's ledger: the receipts it sent, an external system's state outside the app's transactions. */
export class AddReceipts1796774400001 implements MigrationInterface {
  name = 'AddReceipts1796774400001';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE mailer_receipts (
        id              text        PRIMARY KEY,
        idempotency_key text        UNIQUE,
        account         text        NOT NULL,
        charge_id       text        NOT NULL,
        amount          integer     NOT NULL,
        currency        varchar(3)  NOT NULL,
        created         timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE mailer_receipts');
  }
}
