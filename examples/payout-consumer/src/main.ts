import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { type MicroserviceOptions, Transport } from '@nestjs/microservices';
import { AppModule } from './app.module.js';
import { payoutQueue } from './payout-queue.js';

const app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
  transport: Transport.RMQ,
  options: payoutQueue(process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672', 'payouts'),
});
app.enableShutdownHooks();
await app.listen();
