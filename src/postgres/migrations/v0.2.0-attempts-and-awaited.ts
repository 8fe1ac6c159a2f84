import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { RecordsTable } from './records-table.js';

/**
 * 0.2.0: `attempts` (how many attempts held a claim: a takeover counts) and `awaited` (an attempt waits for the
 * outcome, so completing or releasing it notifies). `IF NOT EXISTS`: development checkouts before the history
 * began created these columns in the 0.1.0 migration.
 */
export function addAttemptsAndAwaitedMigration({ quoted, suffix }: RecordsTable): new () => MigrationInterface {
  return class IdempotencyRecordsV0_2_0_1796256000000 implements MigrationInterface {
    name = `IdempotencyRecordsV0_2_0${suffix}_1796256000000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`
        ALTER TABLE ${quoted}
          ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 1,
          ADD COLUMN IF NOT EXISTS awaited  boolean NOT NULL DEFAULT false`);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`ALTER TABLE ${quoted} DROP COLUMN awaited, DROP COLUMN attempts`);
    }
  };
}
