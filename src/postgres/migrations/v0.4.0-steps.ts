import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { RecordsTable } from './records-table.js';

/**
 * 0.4.0: `steps`, the steps an operation's attempts completed (its recovery points), which a later attempt at the same
 * key skips. Nullable without a default: adding it rewrites no row.
 */
export function addStepsMigration({ quoted, suffix }: RecordsTable): new () => MigrationInterface {
  return class IdempotencyRecordsV0_4_0Steps1796774400000 implements MigrationInterface {
    name = `IdempotencyRecordsV0_4_0Steps${suffix}_1796774400000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`ALTER TABLE ${quoted} ADD COLUMN steps jsonb`);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`ALTER TABLE ${quoted} DROP COLUMN steps`);
    }
  };
}
