/** What the fingerprint of an HTTP request is computed from. */
export interface FingerprintInput {
  /** Upper-case HTTP method. */
  method: string;
  /** The requested path with its query string, as received. */
  url: string;
  /**
   * The request's `Content-Type`, lower-case, without whitespace around `;` (empty when absent): the same bytes
   * as JSON and as form data are different requests.
   */
  contentType: string;
  /** The raw body bytes as received (empty when the request has no body). */
  body: Buffer;
}

/** The HTTP edge's options that `@Idempotent()` may set per route or controller; they override the module's. */
export interface HttpIdempotentOptions {
  /** Refuse requests without a key (400 `idempotency_key_required`). Default: `true`. */
  required?: boolean;
  /**
   * Request fingerprint. Default: sha256 of method, path with query, content type and raw body (`sha256Fingerprint`).
   * `jsonFieldsFingerprint({ exclude })` or `({ include })` compares chosen fields of a JSON body instead. Not used
   * by `IdempotencyService.execute()`, which fingerprints its operation's `input`.
   */
  fingerprint?: (input: FingerprintInput) => string;
  /**
   * Response headers stored and replayed besides `Content-Type` and `Location`. Default: `[]`.
   * `Set-Cookie`, `Content-Length` and hop-by-hop headers are never stored, whatever is listed here.
   */
  storedResponseHeaders?: string[];
  /** Responses whose body is larger are not stored; the claim is released. Default: 1 MiB. */
  maxStoredBodyBytes?: number;
}

/** The HTTP edge's options of `IdempotencyModule.forRoot()`. */
export interface HttpIdempotencyModuleOptions extends HttpIdempotentOptions {
  /** Request header carrying the key. Default: `Idempotency-Key`. */
  headerName?: string;
  /** Response header set to `true` on a replay. Default: `Idempotent-Replay` (Stripe sends `Idempotent-Replayed`). */
  replayHeaderName?: string;
}
