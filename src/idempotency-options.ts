import type { HttpIdempotencyModuleOptions, HttpIdempotentOptions } from './http/http-options.interface.js';
import type { ProtocolIdempotentOptions, ProtocolModuleOptions } from './protocol/idempotency-options.interface.js';

// The options an application writes are each room's own, side by side: each room reads and checks its part of them.

/** Options that `@Idempotent()` may set per route or controller; they override the module's. */
export interface IdempotentOptions extends ProtocolIdempotentOptions, HttpIdempotentOptions {}

/** Options of `IdempotencyModule.forRoot()` (beside its extras, `store` and `isGlobal`). */
export interface IdempotencyModuleOptions extends ProtocolModuleOptions, HttpIdempotencyModuleOptions {}
