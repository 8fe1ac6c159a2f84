import type { HttpIdempotencyModuleOptions } from '../http/http-options.interface.js';

/**
 * What `@ApiIdempotent()` documents a route's idempotency from: the module's HTTP options, so that the options given
 * to `IdempotencyModule.forRoot()` can be passed as they are. Each has the module's default (`profile`: `default`,
 * `headerName`: `Idempotency-Key`, `replayHeaderName`: the profile's, `required`: `true`); an `@Idempotent()` written
 * below `@ApiIdempotent()` on the same method or class overrides them, as it does at run time.
 */
export type ApiIdempotentOptions = Pick<
  HttpIdempotencyModuleOptions,
  'profile' | 'problemTypeBase' | 'headerName' | 'replayHeaderName' | 'required'
>;
