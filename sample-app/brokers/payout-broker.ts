import type { DynamicModule, INestApplication } from '@nestjs/common';

/**
 * A broker the app consumes payout requests from (`PayoutRequestsConsumer` serves them all): the module that makes
 * `@Idempotent()` serve its messages, and how the app, a hybrid one, connects to it. One file per broker.
 */
export interface PayoutBroker {
  /** Imported by the app's module beside `IdempotencyModule.forRoot()`. */
  module: DynamicModule;
  /** Connects the app to the broker (`app.connectMicroservice()`), before `app.startAllMicroservices()`. */
  connect(app: INestApplication): Promise<void>;
}
