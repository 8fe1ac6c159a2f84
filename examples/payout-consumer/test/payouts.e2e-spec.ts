import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import type { INestMicroservice } from '@nestjs/common';
import { ClientRMQ, RmqRecordBuilder, ServerRMQ } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import amqp from 'amqplib';
import pg from 'pg';
import { firstValueFrom } from 'rxjs';
import { AppModule } from '../src/app.module.js';
import { payoutQueue } from '../src/payout-queue.js';

const serverUrl = process.env.DATABASE_URL;
const rabbitMqUrl = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const broker = await amqp.connect(rabbitMqUrl, { timeout: 3_000 }).catch((error: Error) => {
  if (process.env.CI === 'true') throw error;
  console.warn(`payout-consumer: skipped, RabbitMQ cannot be reached at ${rabbitMqUrl}: ${error.message}`);
  return undefined;
});

(broker ? describe : describe.skip)('payout consumer, installed from the tarball', () => {
  const database = `payout_consumer_test_${randomBytes(6).toString('hex')}`;
  const queue = `payouts_test_${randomBytes(6).toString('hex')}`;
  let admin: pg.Client;
  let channel: amqp.ConfirmChannel;
  let app: INestMicroservice;
  /** Deliveries whose processing Nest has ended (the module acknowledges a message before that). */
  let handled = 0;

  beforeAll(async () => {
    if (!serverUrl) throw new Error('Set DATABASE_URL to a PostgreSQL server the tests may create databases on');
    admin = new pg.Client({ connectionString: serverUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${database}`);
    const url = new URL(serverUrl);
    url.pathname = `/${database}`;
    process.env.DATABASE_URL = url.toString();
    channel = await broker!.createConfirmChannel();
    await channel.assertQueue(`${queue}.dead`, { durable: true });
    const server = new ServerRMQ(payoutQueue(rabbitMqUrl, queue));
    server.setOnProcessingEndHook(() => (handled += 1));
    const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = moduleRef.createNestMicroservice({ strategy: server });
    await app.listen();
  });

  afterAll(async () => {
    await app?.close();
    await channel?.deleteQueue(queue);
    await channel?.deleteQueue(`${queue}.dead`);
    await broker?.close();
    await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await admin.end();
  });

  async function payoutRows(account: string): Promise<number> {
    const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await client.connect();
    try {
      const { rows } = await client.query('SELECT count(*)::int AS n FROM payouts WHERE account = $1', [account]);
      return (rows[0] as { n: number }).n;
    } finally {
      await client.end();
    }
  }

  async function until(done: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  it('pays a payout request delivered twice once', async () => {
    const before = handled;
    const message = Buffer.from(
      JSON.stringify({ pattern: 'payout.requested', data: { account: 'acct_1', amount: 500 } }),
    );
    for (let i = 0; i < 2; i += 1) channel.sendToQueue(queue, message, { messageId: 'payout-1', persistent: true });
    await channel.waitForConfirms();
    await until(() => handled - before === 2, 'both deliveries');
    expect(await payoutRows('acct_1')).toBe(1);
  });

  it("answers a payout created twice with the first one's id", async () => {
    const client = new ClientRMQ({
      urls: [rabbitMqUrl],
      queue,
      queueOptions: payoutQueue(rabbitMqUrl, queue).queueOptions,
    });
    try {
      const create = () =>
        firstValueFrom(
          client.send<{ payoutId: string }>(
            'payout.create',
            new RmqRecordBuilder({ account: 'acct_2', amount: 700 }).setOptions({ messageId: 'payout-2' }).build(),
          ),
        );
      const first = await create();
      expect(await create()).toEqual(first);
      expect(await payoutRows('acct_2')).toBe(1);
    } finally {
      await client.close();
    }
  });
});
