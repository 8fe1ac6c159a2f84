import type { FinalStatusOptions } from '../transport-kit/final-statuses.js';
import type { HttpProfileName } from './answers/http-profile.js';

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
export interface HttpIdempotentOptions extends FinalStatusOptions {
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
  /**
   * Response header set to `true` on a replay. Default: the profile's, `Idempotent-Replay` (`Idempotent-Replayed`
   * with the `stripe` profile).
   */
  replayHeaderName?: string;
  /**
   * The dialect of the answers the module writes itself (refusals, and the replay header), for the whole API, since a
   * client speaks one: `default` (JSON `{ statusCode, error, message }`), `stripe` (Stripe's statuses, `{ error: {
   * type, code, message } }`, `Stripe-Should-Retry`, `Idempotent-Replayed`), or `ietf` (RFC 9457
   * `application/problem+json`). See docs/profiles.md. Default: `default`.
   */
  profile?: HttpProfileName;
  /**
   * With the `ietf` profile, the start of each problem's `type` URI, which ends with the refusal's code: a page of
   * the API's documentation, say (`https://api.example.com/problems/` gives `…/problems/request_in_progress`).
   * Default: `urn:nest-idempotency:problem:`.
   */
  problemTypeBase?: string;
}
