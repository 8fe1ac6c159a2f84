import type { MigrationInterface, QueryRunner } from 'typeorm';
import { quoteIdentifier } from '../postgres-identifiers.js';
import type { RecordsTable } from './records-table.js';

/**
 * 0.4.0: an index of the records in progress, by endpoint, through which the completer finds the abandoned ones
 * without reading the completed ones. Partial: it holds only the few records in progress. `attempts > 0` holds for
 * every record, and only the statements meant to read it (the completer's, the operator's stuck list) say it: no other statement implies the predicate, so none can be planned through the index
 * (a completion planned on an empty table would otherwise scan every record in progress rather than reach its own). Building it reads the table once; an index of that name
 * made beforehand (`CREATE INDEX CONCURRENTLY`, on a large table) is kept.
 */
export function addInProgressIndexMigration({ quoted, bareName, suffix }: RecordsTable): new () => MigrationInterface {
  const index = quoteIdentifier(`${bareName}_in_progress_idx`);
  const schema = quoted.includes('.') ? `${quoted.slice(0, quoted.lastIndexOf('.'))}.` : '';
  return class IdempotencyRecordsV0_4_0InProgressIndex1796860800000 implements MigrationInterface {
    name = `IdempotencyRecordsV0_4_0InProgressIndex${suffix}_1796860800000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(
        `CREATE INDEX IF NOT EXISTS ${index} ON ${quoted} (endpoint) WHERE status = 'in_progress' AND attempts > 0`,
      );
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`DROP INDEX ${schema}${index}`);
    }
  };
}
