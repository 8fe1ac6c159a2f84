import { DEFAULT_TABLE_NAME } from '../postgres-options.js';
import { quoteTableName } from '../postgres-identifiers.js';

/** The names one table's migrations are written with. */
export interface RecordsTable {
  /** The table name, quoted and optionally schema-qualified. */
  quoted: string;
  /** The table name without its schema, which constraint and index names are derived from. */
  bareName: string;
  /** Appended to each migration's name, so that one application can create several tables. */
  suffix: string;
}

export function recordsTable(tableName: string): RecordsTable {
  return {
    quoted: quoteTableName(tableName),
    bareName: tableName.split('.').pop() as string,
    suffix:
      tableName === DEFAULT_TABLE_NAME
        ? ''
        : tableName.replace(/(^|[^A-Za-z0-9]+)([A-Za-z0-9])/g, (_, __, c: string) => c.toUpperCase()),
  };
}
