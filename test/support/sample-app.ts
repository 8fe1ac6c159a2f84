import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { createSampleApp, type SampleAppOptions } from '../../sample-app/create-sample-app.js';
import type { SampleConfig } from '../../sample-app/sample-config.js';
import { RecordingLogger } from './recording-logger.js';
import { stopProcess, trackSpawnedProcess } from './spawned-processes.js';

export { PLATFORMS, type Platform } from './platforms.js';

export interface RunningApp {
  url: string;
  close(): Promise<void>;
}

export const ALICE = 'sk_test_alice';
export const BOB = 'sk_test_bob';

/**
 * What the sample apps of a test file log. Nest's module-level loggers write through the logger of the app made
 * last, so every app of the file shares this one: the test reads the errors it expects here, and none are printed.
 */
export const sampleAppLogger = new RecordingLogger();

/** The sample app in this process, listening on a free loopback port (on Express unless `config.platform` says). */
export async function startSampleApp(
  config: Partial<SampleConfig> & Pick<SampleConfig, 'databaseUrl'>,
  options: SampleAppOptions = {},
): Promise<RunningApp & { app: INestApplication }> {
  const app = await createSampleApp(
    {
      port: 0,
      databasePoolSize: 20,
      transactionPooler: false,
      ttlSeconds: 86_400,
      leaseSeconds: 60,
      providerDelayMs: 0,
      transactional: true,
      inFlight: 'conflict',
      profile: 'default',
      shutdownTimeoutSeconds: 10,
      completerIntervalSeconds: false,
      completerBackoffSeconds: 10,
      payoutWorker: false,
      payoutPollMs: 500,
      platform: 'express',
      ...config,
    },
    { logger: sampleAppLogger, ...options },
  );
  await app.listen(0, '127.0.0.1');
  return { app, url: await app.getUrl(), close: () => app.close() };
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The sample app as `npm start` runs it, in a child process of its own (which a test may SIGKILL); `SAMPLE_PLATFORM` in
 * `env` picks its platform. Its completer is off unless `env` turns it on: a test's abandoned charges stay as it left them.
 */
export function spawnSampleApp(env: Record<string, string>): Promise<SpawnedApp> {
  return spawnTypeScriptServer('sample-app/main.ts', { IDEMPOTENCY_COMPLETER_INTERVAL_SECONDS: 'off', ...env });
}

/** A child process of the app's: `output()` is all it printed so far, from its start, stdout and stderr. */
export interface SpawnedApp extends RunningApp {
  child: ChildProcess;
  output(): string;
}

/**
 * A TypeScript entry point of this repository run as a child process through the project's loader (with
 * `nodeFlags` before it, `--cpu-prof` say); it prints `listening on port N` once it serves.
 */
export async function spawnTypeScriptServer(
  entry: string,
  env: Record<string, string>,
  nodeFlags: string[] = [],
): Promise<SpawnedApp> {
  const child = spawn(process.execPath, [...nodeFlags, '--import', './scripts/register-ts.mjs', entry], {
    cwd: ROOT,
    env: { ...process.env, NODE_OPTIONS: '', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  trackSpawnedProcess(child);
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`${entry} did not start within 30 s:\n${output}`));
      void stopProcess(child); // it would go on starting, and serve, with no test to stop it
    }, 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on port (\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${entry} exited with ${code} before listening:\n${output}`));
    });
  });
  return { child, url: `http://127.0.0.1:${port}`, close: () => stopProcess(child), output: () => output };
}

/** A POST as `apiKey`, with `key` as Idempotency-Key when given; a string body is sent form-encoded. */
export function post(url: string, path: string, body: object | string, key?: string, apiKey = ALICE) {
  const test = request(url).post(path).set('X-API-Key', apiKey);
  if (key !== undefined) test.set('Idempotency-Key', key);
  return typeof body === 'string' ? test.type('form').send(body) : test.send(body);
}

export const postCharge = (url: string, body: object | string, key?: string, apiKey = ALICE) =>
  post(url, '/v1/charges', body, key, apiKey);

/** What one charge of a burst got: its status, its replay header, and its body. */
export interface BurstAnswer {
  status: number;
  replay: string | null;
  body: { id?: string; error?: string };
}

/**
 * Sends one charge of `charge` per key of `keys` (a key may repeat), all at once as `apiKey`, each over its own
 * connection (not a pooled one, which would queue them), spread over `urls` in turn.
 */
export function chargeBurst(
  urls: string[],
  keys: string[],
  apiKey: string,
  charge: object = { amount: 500, currency: 'eur' },
): Promise<BurstAnswer[]> {
  const body = JSON.stringify(charge);
  return Promise.all(
    keys.map(async (key, i) => {
      const response = await fetch(`${urls[i % urls.length]}/v1/charges`, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          'X-API-Key': apiKey,
          'Idempotency-Key': key,
          Connection: 'close',
        },
        body,
      });
      const answer = (await response.json()) as BurstAnswer['body'];
      return { status: response.status, replay: response.headers.get('idempotent-replay'), body: answer };
    }),
  );
}
