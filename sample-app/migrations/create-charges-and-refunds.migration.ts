import type { MigrationInterface, QueryRunner } from 'typeorm';

export class CreateChargesAndRefunds1764633600001 implements MigrationInterface {
  name = 'CreateChargesAndRefunds1764633600001';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE charges (
        id              text        PRIMARY KEY,
        account         text        NOT NULL,
        amount          integer     NOT NULL CHECK (amount > 0),
        currency        varchar(3)  NOT NULL,
        status          text        NOT NULL,
        description     text,
        source          text,
        provider_charge_id text,
        amount_refunded integer     NOT NULL DEFAULT 0 CHECK (amount_refunded BETWEEN 0 AND amount),
        created         timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
    await queryRunner.query(`CREATE INDEX charges_account_created_idx ON charges (account, created)`);
    await queryRunner.query(`
      CREATE TABLE refunds (
        id        text        PRIMARY KEY,
        account   text        NOT NULL,
        charge_id text        NOT NULL REFERENCES charges (id),
        amount    integer     NOT NULL CHECK (amount > 0),
        created   timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
    // The fake payment provider's own ledger: an external system's state, outside the app's transactions.
    await queryRunner.query(`
      CREATE TABLE provider_charges (
        id              text        PRIMARY KEY,
        idempotency_key text        UNIQUE,
        account         text        NOT NULL,
        amount          integer     NOT NULL,
        currency        varchar(3)  NOT NULL,
        created         timestamptz NOT NULL DEFAULT clock_timestamp()
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE provider_charges');
    await queryRunner.query('DROP TABLE refunds');
    await queryRunner.query('DROP TABLE charges');
  }
}
