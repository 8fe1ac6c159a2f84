import type { NestApplicationOptions, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { PLATFORMS, type Platform } from '../test/support/platforms.js';

/** BENCH_PLATFORM: the HTTP platform a bench app runs on, Nest's default Express (the default) or Fastify. */
function platformFromEnv(): Platform {
  const raw = process.env.BENCH_PLATFORM || 'express';
  if (!(PLATFORMS as readonly string[]).includes(raw))
    throw new Error(`BENCH_PLATFORM must be one of ${PLATFORMS.join(', ')}, got ${JSON.stringify(raw)}`);
  return raw as Platform;
}

/**
 * Serves a bench app (ours, the peer's) on BENCH_PLATFORM, in a process of its own so that the load generator does not
 * share its event loop, and prints `<name> listening on port N` for the bench (`spawnTypeScriptServer`) to find it.
 * On SIGTERM or SIGINT it closes the app, then runs `afterClose` (what the app owns beside Nest: a client), and exits;
 * an app that fails to start prints why and exits with 1.
 */
export function serveBenchApp(
  module: Type,
  name: string,
  options: NestApplicationOptions = {},
  afterClose: () => Promise<unknown> = async () => undefined,
): void {
  serve(module, name, options, afterClose).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}

async function serve(
  module: Type,
  name: string,
  options: NestApplicationOptions,
  afterClose: () => Promise<unknown>,
): Promise<void> {
  const all = { ...options, logger: ['error' as const] };
  const app =
    platformFromEnv() === 'fastify'
      ? await NestFactory.create(module, new FastifyAdapter(), all)
      : await NestFactory.create(module, all);
  await app.listen(0, '127.0.0.1');
  console.log(`${name} listening on port ${new URL(await app.getUrl()).port}`);
  const stop = () =>
    void app
      .close()
      .then(afterClose)
      .then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
