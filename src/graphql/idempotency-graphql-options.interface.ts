/** Options of `IdempotencyGraphQLModule.forRoot()`. */
export interface IdempotencyGraphQLOptions {
  /**
   * The mutation argument that carries the key (`createCharge(idempotencyKey: String, ...)`), so that the schema shows
   * it and each field of a document carries its own. A field without it reads the header. Default: none (the header
   * only).
   */
  keyArgument?: string;
  /**
   * The request header that carries the key, shared by every field of the document it sends. Default:
   * `Idempotency-Key` (set it here too where the HTTP routes' `headerName` is another).
   */
  headerName?: string;
  /**
   * Refuse an idempotent mutation without a key (`IDEMPOTENCY_KEY_REQUIRED`) instead of running it unguarded.
   * Default: `false`.
   */
  required?: boolean;
}
