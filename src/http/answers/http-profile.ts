import type { IdempotencyError } from '../../protocol/idempotency.errors.js';

/** The dialects the HTTP edge answers in (`profile` of the module's options). */
export const HTTP_PROFILES = ['default', 'stripe', 'ietf'] as const;
export type HttpProfileName = (typeof HTTP_PROFILES)[number];

/** A refusal as a profile words it: everything of the answer but `Retry-After`, which every profile sends alike. */
export interface HttpRefusalAnswer {
  status: number;
  /** The JSON body. */
  body: object;
  /** Headers besides `Retry-After`, lower-case; `content-type` when it is not `application/json`. */
  headers: Record<string, string>;
}

/** What a profile decides of the answers the module writes itself. */
export interface HttpProfile {
  readonly name: HttpProfileName;
  /** The replay header, unless the application names its own (`replayHeaderName`). */
  readonly replayHeaderName: string;
  refusal(error: IdempotencyError): HttpRefusalAnswer;
}
