import type { DynamicModule, INestMicroservice } from '@nestjs/common';
import type { CustomTransportStrategy, MicroserviceOptions, Server } from '@nestjs/microservices';
import type { RecordingLogger } from './recording-logger.js';
import { compileTestModule, type RecordsPlace, type TestModuleOptions } from './test-app.js';

/** A consumer app of a test: the test module of its options with a broker's module, on that broker's server. */
export interface TestConsumer extends RecordsPlace {
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
  const compiled = await compileTestModule({
    ...options,
    imports: [transportModule, ...(options.imports ?? [])],
  });
  const { moduleRef, logger } = compiled;
  const handled = { count: 0 };
  // Nest's end of a message's processing: after its pipeline (and so the module's settlement of it) has ended.
  server.setOnProcessingEndHook(() => (handled.count += 1));
  let app: INestMicroservice;
  try {
    app = compiled.closing(moduleRef.createNestMicroservice<MicroserviceOptions>({ strategy: server, logger }));
    await app.listen();
  } catch (error) {
    await compiled.abandon();
    throw error;
  }
  let closed: Promise<void> | undefined;
  return { app, logger, handled, redis: compiled.redis, close: () => (closed ??= app.close()) };
}
