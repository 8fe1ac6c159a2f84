import type { Provider } from '@nestjs/common';
import { ModulesContainer, Reflector } from '@nestjs/core';
import { DrainBeforeClose } from './drain-before-close.js';
import { HttpTransport } from './http-transport.js';
import { IDEMPOTENT_ROUTES_TRACKED } from './http.constants.js';
import { HttpPlatformCheck } from './platforms/http-platform-check.js';
import { trackIdempotentRoutes } from './requests/idempotent-routes.js';

/**
 * The HTTP transport's registration, as each room's module registers its own: the transport (which registers with
 * `IdempotencyTransports`), the platform's start-up checks, the shutdown's drain chained onto the adapter's
 * `beforeClose()`, and the idempotent routes' handlers wrapped. `IdempotencyModule` provides it, since every Nest
 * application it serves has HTTP routes or none to claim.
 */
export const HTTP_TRANSPORT_PROVIDERS: Provider[] = [
  HttpTransport,
  HttpPlatformCheck,
  DrainBeforeClose,
  { provide: IDEMPOTENT_ROUTES_TRACKED, inject: [ModulesContainer, Reflector], useFactory: trackIdempotentRoutes },
];
