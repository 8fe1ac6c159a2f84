// `nest-idempotency/http`: the HTTP transport's options and the helpers an application builds them from. The module
// and `@Idempotent()` are the main entry's; these are for an application that names the options' types or picks a
// fingerprint, a profile or a final-status rule of its own.
export type {
  FingerprintInput,
  HttpIdempotencyModuleOptions,
  HttpIdempotentOptions,
} from './http-options.interface.js';
export { HTTP_PROFILES, type HttpProfileName } from './answers/http-profile.js';
export { sha256Fingerprint } from './requests/http-policy.js';
export { jsonFieldsFingerprint, type JsonFieldsSelection } from './requests/json-fields-fingerprint.js';
export { isFinalStatusByDefault } from '../transport-kit/final-statuses.js';
export { routeCompletion } from './route-completion.js';
