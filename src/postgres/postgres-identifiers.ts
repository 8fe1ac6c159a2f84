/** Quotes a name as a PostgreSQL identifier, whatever characters it holds. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** Quotes a table name, optionally schema-qualified, as a PostgreSQL identifier. */
export function quoteTableName(tableName: string): string {
  return tableName.split('.').map(quoteIdentifier).join('.');
}
