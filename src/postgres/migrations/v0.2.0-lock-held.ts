import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { RecordsTable } from './records-table.js';

/**
 * 0.2.0, second step: `lock_held` (the claim's holder holds the scope's advisory lock for as long as its transaction
 * is open, so that a claim left by a holder whose transaction has ended can be taken over before its lease lapses).
 * A migration of its own, not a change of the first 0.2.0 one, which development databases have already run.
 */
export function addLockHeldMigration({ quoted, suffix }: RecordsTable): new () => MigrationInterface {
  return class IdempotencyRecordsV0_2_0LockHeld1796342400000 implements MigrationInterface {
    name = `IdempotencyRecordsV0_2_0LockHeld${suffix}_1796342400000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`ALTER TABLE ${quoted} ADD COLUMN lock_held boolean NOT NULL DEFAULT false`);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`ALTER TABLE ${quoted} DROP COLUMN lock_held`);
    }
  };
}
