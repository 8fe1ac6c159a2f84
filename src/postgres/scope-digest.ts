/**
 * The records table's key: a 16-byte digest of the scope (a uuid), of its parts length-prefixed so that no two scopes
 * share an input (`acct`, `x:y` and `acct:x`, `y` do not). The same expression as the scope-digest migration's, which
 * computed it for the rows already there: changing it needs a migration that recomputes the column.
 *
 * md5 because it is IMMUTABLE on text and 16 bytes long (sha256 takes bytea, and `convert_to` is only STABLE). Two scopes
 * of one digest (a crafted md5 collision) cannot reach each other's record: every statement compares the scope too,
 * and a claim whose key is held by another scope's record claims nothing.
 */
export function scopeDigestSql(account: string, endpoint: string, key: string): string {
  const [a, e, k] = [account, endpoint, key].map((part) => `(${part})`);
  return `md5(length(${a})::text || ':' || ${a} || length(${e})::text || ':' || ${e} || ${k})::uuid`;
}
