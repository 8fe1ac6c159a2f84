import type { MigrationInterface, QueryRunner } from 'typeorm';

export class CreateSampleSchema1764633600001 implements MigrationInterface {
  name = 'CreateSampleSchema1764633600001';

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
    // Payouts are paid by a background job; each job keeps the idempotency key it was created with.
    await queryRunner.query(`
      CREATE TABLE payout_jobs (
        id                 text        PRIMARY KEY,
        account            text        NOT NULL,
        amount             integer     NOT NULL CHECK (amount > 0),
        currency           varchar(3)  NOT NULL,
        status             text        NOT NULL,
        idempotency_key    text        NOT NULL,
        provider_payout_id text,
        created            timestamptz NOT NULL DEFAULT clock_timestamp(),
        paid_at            timestamptz
      )`);
    await queryRunner.query(`CREATE INDEX payout_jobs_pending_idx ON payout_jobs (created) WHERE status = 'pending'`);
    // The fake payment provider's own ledgers: an external system's state, outside the app's transactions.
    for (const ledger of ['provider_charges', 'provider_payouts']) {
      await queryRunner.query(`
        CREATE TABLE ${ledger} (
          id              text        PRIMARY KEY,
          idempotency_key text        UNIQUE,
          account         text        NOT NULL,
          amount          integer     NOT NULL,
          currency        varchar(3)  NOT NULL,
          created         timestamptz NOT NULL DEFAULT clock_timestamp()
        )`);
    }
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE provider_payouts');
    await queryRunner.query('DROP TABLE payout_jobs');
    await queryRunner.query('DROP TABLE provider_charges');
    await queryRunner.query('DROP TABLE refunds');
    await queryRunner.query('DROP TABLE charges');
  }
}
