import type { DynamicModule, INestMicroservice } from '@nestjs/common';
import type { CustomTransportStrategy, MicroserviceOptions, Server } from '@nestjs/microservices';
import type { RecordingLogger } from './recording-logger.js';
import { compileTestModule, type TestModuleOptions } from './test-app.js';

/** A consumer app of a test: the test module of its options with a broker's module, on that broker's server. */
export interface TestConsumer {
  app: INestMicroservice;
  /** How many messages' processing has ended (the module settles a message before that). */
  handled: { readonly count: number };
  logger: RecordingLogger;
  /** Closes the consumer (what it has not acknowledged, the broker redelivers); once, however often called. */
  close(): Promise<void>;
}

/** Starts the test module of `options` with `transportModule` (a broker's idempotency module) on `server`. */
export async function startConsumerApp(
  options: TestModuleOptions,
  transportModule: DynamicModule,
  server: CustomTransportStrategy & Pick<Server, 'setOnProcessingEndHook'>,
): Promise<TestConsumer> {
  const { moduleRef, logger } = await compileTestModule({
    ...options,
    imports: [transportModule, ...(options.imports ?? [])],
  });
  const handled = { count: 0 };
  // Nest's end of a message's processing: after its pipeline (and so the module's settlement of it) has ended.
  server.setOnProcessingEndHook(() => (handled.count += 1));
  const app = moduleRef.createNestMicroservice<MicroserviceOptions>({ strategy: server, logger });
  await app.listen();
  let closed: Promise<void> | undefined;
  return { app, logger, handled, close: () => (closed ??= app.close()) };
}
