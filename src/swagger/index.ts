// The public API of `nest-idempotency/swagger`: OpenAPI documentation of idempotent routes. It loads
// `@nestjs/swagger` (an optional peer dependency), which the main entry point does not.
export { ApiIdempotent } from './api-idempotent.decorator.js';
export type { ApiIdempotentOptions } from './api-idempotent-options.interface.js';
