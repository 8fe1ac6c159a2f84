import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Summarizes a V8 `.cpuprofile` (written by `node --cpu-prof`): the top frames by self and inclusive time, and the
 * share of the samples by area (our `src/` rooms, pg, ioredis, TypeORM, Nest, Express, the peer and its node-redis,
 * Node.js internals, GC, idle).
 * `bench/profile.ts` runs it on the bench app's profile; on its own:
 * `node --import ./scripts/register-ts.mjs bench/profile-summary.ts <file.cpuprofile> [fromMicros] [toMicros] [requests]`.
 */

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The window of the profile to summarize, in the profiler's clock (microseconds of the monotonic clock). */
export interface SampleWindow {
  from?: number;
  to?: number;
}

/** A file of one of our rooms (`src/http/`, `src/redis/`, …). */
const OURS = /\/src\/([^/]+)\//;
/**
 * A package's file: the last `node_modules/<name>/` of its path is its package (a nested one's own, not the package
 * that depends on it).
 */
const PACKAGE = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//g;
/** The packages Express's request handling runs through (Express 5 and what it requires per request). */
const EXPRESS_PACKAGES = new Set([
  'express',
  'router',
  'body-parser',
  'raw-body',
  'finalhandler',
  'on-finished',
  'type-is',
  'content-type',
  'content-disposition',
  'media-typer',
  'mime-types',
  'iconv-lite',
  'qs',
  'parseurl',
  'path-to-regexp',
  'send',
  'etag',
  'fresh',
  'depd',
  'http-errors',
  'statuses',
  'vary',
  'accepts',
  'negotiator',
  'cookie',
  'proxy-addr',
  'forwarded',
  'ipaddr.js',
  'debug',
  'ms',
  'setprototypeof',
  'encodeurl',
  'escape-html',
  'merge-descriptors',
  'utils-merge',
  'cors',
  'object-assign',
  'is-promise',
]);
const PG_PACKAGES = new Set([
  'pg',
  'pg-pool',
  'pg-protocol',
  'pg-types',
  'pg-int8',
  'postgres-array',
  'postgres-bytea',
  'postgres-date',
  'postgres-interval',
  'pg-connection-string',
  'pgpass',
  'buffer-writer',
  'packet-reader',
]);

/** ioredis (the Redis store's client) and what it requires per command. */
const IOREDIS_PACKAGES = new Set([
  'ioredis',
  'redis-parser',
  'redis-errors',
  'denque',
  'cluster-key-slot',
  'standard-as-callback',
]);

/** The area a frame's code belongs to. */
export function areaOf({ functionName, url }: CallFrame): string {
  if (functionName === '(garbage collector)') return 'GC';
  if (functionName === '(idle)') return 'idle';
  if (functionName === '(program)') return 'V8/native (program)';
  if (functionName === '(root)') return 'root';
  const inPackage = [...url.matchAll(PACKAGE)].at(-1);
  if (inPackage) {
    const name = inPackage[1];
    if (PG_PACKAGES.has(name)) return 'pg';
    if (IOREDIS_PACKAGES.has(name)) return 'ioredis';
    // The peer (`bench/peer-app.ts`) and its adapter's client, node-redis 4.
    if (name === 'redis' || name.startsWith('@redis/')) return 'node-redis';
    if (name.startsWith('@node-idempotency/')) return 'peer: @node-idempotency';
    if (name === 'typeorm') return 'typeorm';
    if (name === '@nestjs/platform-express') return 'nest: platform-express';
    if (name.startsWith('@nestjs/')) return 'nest core';
    if (EXPRESS_PACKAGES.has(name)) return 'express';
    return `package: ${name}`;
  }
  const ours = OURS.exec(url);
  if (ours) return `ours: src/${ours[1]}`;
  if (url.includes('/bench/') || url.includes('/test/support/')) return 'bench app';
  if (url.includes('/src/')) return 'ours: src (root)';
  if (url.startsWith('node:') || url === '') return 'node internals';
  return `other: ${url}`;
}

/** The areas that are not code of a package or of ours: their samples are charged to the nearest caller that is. */
const UNOWNED = new Set(['node internals', 'V8/native (program)', 'root']);

function frameName({ functionName, url, lineNumber }: CallFrame): string {
  const file = url.replace(/^file:\/\/.*?\/(node_modules|src|bench)\//, '$1/');
  return `${functionName || '(anonymous)'} ${file ? `${file}:${lineNumber + 1}` : ''}`.trim();
}

export interface ProfileSummary {
  /** Milliseconds of samples in the window, and of them not idle. */
  totalMs: number;
  busyMs: number;
  selfByFrame: [string, number][];
  inclusiveByFrame: [string, number][];
  /** Self time by the area of the sampled frame. */
  selfByArea: [string, number][];
  /** The same, with Node.js internals and native code charged to the nearest frame of a package or of ours. */
  ownedByArea: [string, number][];
}

export function summarize(profile: CpuProfile, window: SampleWindow = {}): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parentOf = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parentOf.set(child, node.id);
  const selfByFrame = new Map<string, number>();
  const inclusiveByFrame = new Map<string, number>();
  const selfByArea = new Map<string, number>();
  const ownedByArea = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, ms: number) => map.set(key, (map.get(key) ?? 0) + ms);
  let totalMs = 0;
  let idleMs = 0;
  let time = profile.startTime;
  for (let i = 0; i < profile.samples.length; i += 1) {
    time += profile.timeDeltas[i];
    // A sample stands for the time until the next one.
    const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    if ((window.from !== undefined && time < window.from) || (window.to !== undefined && time > window.to)) continue;
    const leaf = byId.get(profile.samples[i]) as ProfileNode;
    const area = areaOf(leaf.callFrame);
    totalMs += ms;
    if (area === 'idle') idleMs += ms;
    add(selfByFrame, frameName(leaf.callFrame), ms);
    add(selfByArea, area, ms);
    let owner = area;
    const seen = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parentOf.get(id)) {
      const frame = (byId.get(id) as ProfileNode).callFrame;
      const name = frameName(frame);
      if (!seen.has(name)) {
        seen.add(name);
        add(inclusiveByFrame, name, ms);
      }
      if (UNOWNED.has(owner)) owner = areaOf(frame);
    }
    add(ownedByArea, owner, ms);
  }
  const sorted = (map: Map<string, number>) => [...map].sort((a, b) => b[1] - a[1]);
  return {
    totalMs,
    busyMs: totalMs - idleMs,
    selfByFrame: sorted(selfByFrame),
    inclusiveByFrame: sorted(inclusiveByFrame),
    selfByArea: sorted(selfByArea),
    ownedByArea: sorted(ownedByArea),
  };
}

/** The summary as text: shares of the busy (non-idle) time, and of requests when their number is given. */
export function formatSummary(summary: ProfileSummary, top = 25, requests?: number): string {
  const { busyMs, totalMs } = summary;
  const percent = (ms: number) => `${((100 * ms) / busyMs).toFixed(1).padStart(5)}%`;
  const perRequest = (ms: number) => (requests ? `  ${((1000 * ms) / requests).toFixed(1).padStart(6)} µs/req` : '');
  const rows = (entries: [string, number][], count: number) =>
    entries
      .filter(([name]) => !['(idle)', 'idle', '(root)'].includes(name))
      .slice(0, count)
      .map(([name, ms]) => `  ${percent(ms)}${perRequest(ms)}  ${name}`);
  return [
    `${totalMs.toFixed(0)} ms sampled, ${busyMs.toFixed(0)} ms busy (${((100 * busyMs) / totalMs).toFixed(0)}%)` +
      (requests ? `, ${requests} requests: ${((1000 * busyMs) / requests).toFixed(0)} µs busy per request` : '') +
      '; shares of the busy time',
    'By area, self time:',
    ...rows(summary.selfByArea, 30),
    'By area, Node.js internals and native code charged to their nearest caller of a package or of ours:',
    ...rows(summary.ownedByArea, 30),
    `Top ${top} frames by self time:`,
    ...rows(summary.selfByFrame, top),
    `Top ${top} frames by inclusive time:`,
    ...rows(summary.inclusiveByFrame, top),
    `Top ${top} frames of ours (src/) by inclusive time:`,
    ...rows(
      summary.inclusiveByFrame.filter(([name]) => / src\//.test(name)),
      top,
    ),
  ].join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [file, from, to, requests] = process.argv.slice(2);
  if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [fromMicros] [toMicros] [requests]');
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const window = { from: from ? Number(from) : undefined, to: to ? Number(to) : undefined };
  console.log(formatSummary(summarize(profile, window), 25, requests ? Number(requests) : undefined));
}
