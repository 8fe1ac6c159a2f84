// `npm run publish:payout -- <key> <amount> [currency] [account] [--event] [--broker rabbitmq|jetstream]`: sends a
// payout request to the sample app with `key` as its message id, and prints the app's reply: the payout. With --event
// it is emitted as an event instead (nobody waits; the app's log says it was paid). Sent twice with one key, it is
// paid once: the same payout.
// - RabbitMQ (the default): to PAYOUT_QUEUE (sample.payouts) at RABBITMQ_URL (the local broker), with `key` as its
//   AMQP messageId, as Nest's client does it.
// - JetStream (--broker jetstream): to the subject of its pattern, stored in PAYOUT_STREAM (SAMPLE_PAYOUTS) at
//   NATS_URL (the local server), with `key` as its Nats-Msg-Id header, through the package's JetStreamClient. The
//   stream is created as the app creates it when it is not there yet, so that the request waits for the app.
import { Logger } from '@nestjs/common';
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { ClientRMQ, RmqRecordBuilder } from '@nestjs/microservices';
import { firstValueFrom, lastValueFrom, timeout } from 'rxjs';
import { payoutStreamConfig } from '../sample-app/brokers/jetstream-payouts.js';
import { payoutQueueOptions } from '../sample-app/brokers/rabbitmq-payouts.js';
import { JetStreamClient } from '../src/jetstream/index.js';

const REPLY_TIMEOUT_MS = 30_000;
const USAGE =
  'usage: npm run publish:payout -- <key> <amount> [currency] [account] [--event] [--broker rabbitmq|jetstream]';

const args = process.argv.slice(2);
const brokerAt = args.indexOf('--broker');
const broker = brokerAt === -1 ? 'rabbitmq' : args[brokerAt + 1];
const rest = brokerAt === -1 ? args : args.filter((_, at) => at !== brokerAt && at !== brokerAt + 1);
const flags = rest.filter((arg) => arg.startsWith('--'));
const [key, amount, currency = 'eur', account = 'sk_test_demo'] = rest.filter((arg) => !arg.startsWith('--'));
if (!key || !amount || flags.some((flag) => flag !== '--event') || !['rabbitmq', 'jetstream'].includes(broker)) {
  console.error(USAGE);
  process.exit(2);
}
const event = flags.includes('--event');
const payload = { account, amount: Number(amount), currency };

try {
  await (broker === 'jetstream' ? publishToJetStream() : publishToRabbitMq());
} catch (error) {
  console.error(
    error instanceof Error && error.name === 'TimeoutError'
      ? `No reply within ${REPLY_TIMEOUT_MS / 1000} s: is the sample app running with ${broker === 'jetstream' ? 'NATS_URL' : 'RABBITMQ_URL'}? (the request waits for it)`
      : error,
  );
  process.exitCode = 1;
}

async function publishToRabbitMq(): Promise<void> {
  // The reply (or the error) is the output; the client's "connected" line is not.
  Logger.overrideLogger(['error', 'warn']);
  const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672';
  const queue = process.env.PAYOUT_QUEUE || 'sample.payouts';
  const client = new ClientRMQ({ urls: [url], queue, queueOptions: payoutQueueOptions(queue) });
  const record = new RmqRecordBuilder(payload).setOptions({ messageId: key, persistent: true }).build();
  try {
    await client.connect();
    if (event) {
      await lastValueFrom(client.emit('payouts.requested', record), { defaultValue: undefined });
      console.log(`Published payouts.requested with messageId ${key} to ${queue}`);
    } else {
      console.log(
        JSON.stringify(await firstValueFrom(client.send('payouts.create', record).pipe(timeout(REPLY_TIMEOUT_MS)))),
      );
    }
  } finally {
    await client.close();
  }
}

async function publishToJetStream(): Promise<void> {
  const connection = await connect({ servers: process.env.NATS_URL || 'nats://127.0.0.1:4222' });
  const stream = process.env.PAYOUT_STREAM || 'SAMPLE_PAYOUTS';
  try {
    await ensureStream(connection, stream);
    const client = new JetStreamClient(connection);
    if (event) {
      const stored = await client.emit('payouts.requested', payload, { msgId: key });
      console.log(
        stored.duplicate
          ? `The stream ${stream} dropped payouts.requested with Nats-Msg-Id ${key}: a duplicate within its window`
          : `Published payouts.requested with Nats-Msg-Id ${key} to ${stream}`,
      );
    } else {
      const reply = client.send('payouts.create', payload, { msgId: key, timeoutMs: REPLY_TIMEOUT_MS });
      console.log(JSON.stringify(await reply));
    }
  } finally {
    await connection.close();
  }
}

/** The app provisions the stream at its start; a request published before that would find no stream to store it. */
async function ensureStream(connection: Awaited<ReturnType<typeof connect>>, stream: string): Promise<void> {
  const manager = await jetstreamManager(connection);
  try {
    await manager.streams.info(stream);
  } catch (error) {
    if (!(error instanceof JetStreamApiError && error.code === JetStreamApiCodes.StreamNotFound)) throw error;
    await manager.streams.add(payoutStreamConfig(stream));
  }
}
