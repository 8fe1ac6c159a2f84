import type { MigrationInterface, QueryRunner } from 'typeorm';
import { quoteIdentifier } from '../postgres-identifiers.js';
import type { RecordsTable } from './records-table.js';

/**
 * 0.1.0: the records table, its primary key (the single-flight lock) and the index the purge reads. Its name
 * is the one every checkout before the history began recorded, so that TypeORM counts it as applied there.
 */
export function createRecordsMigration({ quoted, bareName, suffix }: RecordsTable): new () => MigrationInterface {
  return class CreateIdempotencyRecords1764633600000 implements MigrationInterface {
    name = `CreateIdempotencyRecords${suffix}1764633600000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`
        CREATE TABLE ${quoted} (
          account          text                     NOT NULL,
          endpoint         text                     NOT NULL,
          idempotency_key  character varying(255)   NOT NULL,
          fingerprint      text                     NOT NULL,
          status           text                     NOT NULL,
          attempt          uuid                     NOT NULL,
          response_status  smallint,
          response_headers jsonb,
          response_body    bytea,
          created_at       timestamp with time zone NOT NULL,
          locked_until     timestamp with time zone,
          completed_at     timestamp with time zone,
          expires_at       timestamp with time zone NOT NULL,
          CONSTRAINT ${quoteIdentifier(`${bareName}_pkey`)} PRIMARY KEY (account, endpoint, idempotency_key)
        )`);
      await queryRunner.query(
        `CREATE INDEX ${quoteIdentifier(`${bareName}_expires_at_idx`)} ON ${quoted} (expires_at)`,
      );
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`DROP TABLE ${quoted}`);
    }
  };
}
