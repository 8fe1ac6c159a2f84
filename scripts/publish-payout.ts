// `npm run publish:payout -- <key> <amount> [currency] [account] [--event]`: sends a payout request to the sample
// app's queue (RABBITMQ_URL, default the local broker; PAYOUT_QUEUE, default sample.payouts) with `key` as its AMQP
// messageId, as Nest's client does it, and prints the app's reply: the payout. With --event it is emitted as an event
// instead (nobody waits; the app's log says it was paid). Sent twice with one key, it is paid once: the same payout.
import { Logger } from '@nestjs/common';
import { ClientRMQ, RmqRecordBuilder } from '@nestjs/microservices';
import { firstValueFrom, lastValueFrom, timeout } from 'rxjs';
import { payoutQueueOptions } from '../sample-app/brokers/rabbitmq-payouts.js';

const REPLY_TIMEOUT_MS = 30_000;

const flags = process.argv.slice(2).filter((arg) => arg.startsWith('--'));
const [key, amount, currency = 'eur', account = 'sk_test_demo'] = process.argv
  .slice(2)
  .filter((arg) => !arg.startsWith('--'));
if (!key || !amount || flags.some((flag) => flag !== '--event')) {
  console.error('usage: npm run publish:payout -- <key> <amount> [currency] [account] [--event]');
  process.exit(2);
}

// The reply (or the error) is the output; the client's "connected" line is not.
Logger.overrideLogger(['error', 'warn']);
const url = process.env.RABBITMQ_URL || 'amqp://guest:guest@127.0.0.1:5672';
const queue = process.env.PAYOUT_QUEUE || 'sample.payouts';
const client = new ClientRMQ({ urls: [url], queue, queueOptions: payoutQueueOptions(queue) });
const record = new RmqRecordBuilder({ account, amount: Number(amount), currency })
  .setOptions({ messageId: key, persistent: true })
  .build();
try {
  await client.connect();
  if (flags.includes('--event')) {
    await lastValueFrom(client.emit('payouts.requested', record), { defaultValue: undefined });
    console.log(`Published payouts.requested with messageId ${key} to ${queue}`);
  } else {
    const payout = await firstValueFrom(client.send<unknown>('payouts.create', record).pipe(timeout(REPLY_TIMEOUT_MS)));
    console.log(JSON.stringify(payout));
  }
} catch (error) {
  console.error(
    error instanceof Error && error.name === 'TimeoutError'
      ? `No reply within ${REPLY_TIMEOUT_MS / 1000} s: is the sample app running with RABBITMQ_URL? (the request waits in ${queue})`
      : error,
  );
  process.exitCode = 1;
} finally {
  await client.close();
}
