import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';

// The fingerprint hashes the body bytes as received, so Nest must keep them (rawBody).
const app = await NestFactory.create(AppModule, { rawBody: true });
// On SIGTERM, running attempts finish and store their outcomes before the pool closes.
app.enableShutdownHooks();
await app.listen(Number(process.env.PORT ?? 3000));
