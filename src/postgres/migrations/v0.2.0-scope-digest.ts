import type { MigrationInterface, QueryRunner } from 'typeorm';
import { quoteIdentifier } from '../postgres-identifiers.js';
import type { RecordsTable } from './records-table.js';

/**
 * 0.2.0, third step: the records table keyed by `scope_digest`, a 16-byte digest of the scope, in place of the
 * primary key on (account, endpoint, idempotency_key). A claim inserts into a random leaf of the key: on a table of a
 * million records the wide key (about 76 bytes an entry) outgrew shared buffers where a digest (16) stays in them
 * (docs/performance.md, "The million-record table"). The statements compute the digest from the scope
 * (`scopeDigestSql` in scope-digest.ts) and compare the scope too, so a digest shared by two scopes never lets one
 * touch the other's record.
 *
 * The digest is computed here with the same expression, frozen in this migration: the column is added as a generated
 * one (one rewrite of the table computes it for every row), then made a plain column (PostgreSQL 13 and later), which
 * the store writes on each claim.
 */
export function addScopeDigestMigration({ quoted, bareName, suffix }: RecordsTable): new () => MigrationInterface {
  const primaryKey = quoteIdentifier(`${bareName}_pkey`);
  return class IdempotencyRecordsV0_2_0ScopeDigest1796428800000 implements MigrationInterface {
    name = `IdempotencyRecordsV0_2_0ScopeDigest${suffix}_1796428800000`;

    async up(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`
        ALTER TABLE ${quoted}
          ADD COLUMN scope_digest uuid NOT NULL GENERATED ALWAYS AS (
            md5(length(account)::text || ':' || account || length(endpoint)::text || ':' || endpoint || idempotency_key)::uuid
          ) STORED`);
      await queryRunner.query(`ALTER TABLE ${quoted} ALTER COLUMN scope_digest DROP EXPRESSION`);
      await queryRunner.query(
        `ALTER TABLE ${quoted} DROP CONSTRAINT ${primaryKey}, ADD CONSTRAINT ${primaryKey} PRIMARY KEY (scope_digest)`,
      );
    }

    async down(queryRunner: QueryRunner): Promise<void> {
      await queryRunner.query(`
        ALTER TABLE ${quoted}
          DROP CONSTRAINT ${primaryKey},
          DROP COLUMN scope_digest,
          ADD CONSTRAINT ${primaryKey} PRIMARY KEY (account, endpoint, idempotency_key)`);
    }
  };
}
