import type { MigrationInterface, QueryRunner } from 'typeorm';
import { DEFAULT_TABLE_NAME } from './idempotency-policy.js';
import { quoteIdentifier, quoteTableName } from './postgres-idempotency.store.js';

/**
 * Builds the migration that creates the records table (and its indexes) under `tableName`,
 * for applications that run TypeORM with `synchronize: false`.
 */
export function createIdempotencyRecordsMigration(tableName: string = DEFAULT_TABLE_NAME): new () => MigrationInterface {
  const table = quoteTableName(tableName);
  const bareName = tableName.split('.').pop() as string;
  // One migration name per table, so that several tables can be created by one application's migrations.
  const suffix = tableName === DEFAULT_TABLE_NAME ? '' : tableName.replace(/(^|[^A-Za-z0-9]+)([A-Za-z0-9])/g, (_, __, c: string) => c.toUpperCase());
  return class CreateIdempotencyRecords1764633600000 implements MigrationInterface {
    name = `CreateIdempotencyRecords${suffix}1764633600000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`
        CREATE TABLE ${table} (
          account          text                     NOT NULL,
          endpoint         text                     NOT NULL,
          idempotency_key  character varying(255)   NOT NULL,
          fingerprint      text                     NOT NULL,
          status           text                     NOT NULL,
          attempt          uuid                     NOT NULL,
          attempts         integer                  NOT NULL DEFAULT 1,
          awaited          boolean                  NOT NULL DEFAULT false,
          response_status  smallint,
          response_headers jsonb,
          response_body    bytea,
          created_at       timestamp with time zone NOT NULL,
          locked_until     timestamp with time zone,
          completed_at     timestamp with time zone,
          expires_at       timestamp with time zone NOT NULL,
          CONSTRAINT ${quoteIdentifier(`${bareName}_pkey`)} PRIMARY KEY (account, endpoint, idempotency_key)
        )`);
      await queryRunner.query(`CREATE INDEX ${quoteIdentifier(`${bareName}_expires_at_idx`)} ON ${table} (expires_at)`);
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`DROP TABLE ${table}`);
    }
  };
}

/** The migration for the default table name. */
export const CreateIdempotencyRecords = createIdempotencyRecordsMigration();
