import type { MigrationInterface } from 'typeorm';
import { DEFAULT_TABLE_NAME } from '../postgres-options.js';
import { recordsTable } from './records-table.js';
import { createRecordsMigration } from './v0.1.0-create-records.js';
import { addAttemptsAndAwaitedMigration } from './v0.2.0-attempts-and-awaited.js';
import { addLockHeldMigration } from './v0.2.0-lock-held.js';
import { addStepsMigration } from './v0.4.0-steps.js';
import { addInProgressIndexMigration } from './v0.4.0-in-progress-index.js';

/**
 * The records table's migrations, in the order they apply, for applications that run TypeORM with
 * `synchronize: false`. A release that changes the table adds one (named for its version) and never edits those
 * already released, so that a database created by any earlier version is brought up to date by running them.
 */
export function idempotencyMigrations(tableName: string = DEFAULT_TABLE_NAME): (new () => MigrationInterface)[] {
  const table = recordsTable(tableName);
  return [
    createRecordsMigration(table),
    addAttemptsAndAwaitedMigration(table),
    addLockHeldMigration(table),
    addStepsMigration(table),
    addInProgressIndexMigration(table),
  ];
}
