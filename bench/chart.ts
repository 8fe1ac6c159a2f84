import { CONSUMER_NAME } from './consumer-bench.js';
import { type BenchResult, PEER_NAME } from './bench-result.js';

const ROW = 22;
const LABEL = 300;
const BAR = 420;
const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;');

/** Two bar charts in one SVG: throughput and p99 latency per configuration, concurrency and platform. */
export function renderChart(results: BenchResult[]): string {
  const panel = (title: string, value: (r: BenchResult) => number, unit: string, top: number) => {
    const max = Math.max(...results.map(value), 1);
    const bars = results.map((r, i) => {
      const y = top + 30 + i * ROW;
      const width = Math.max(1, (value(r) / max) * BAR);
      // Fastify's rows in lighter shades of Express's colours.
      const [baseline, transactional, standard, redis] =
        r.platform === 'fastify'
          ? ['#c3c9d4', '#8fb3e3', '#86d3b3', '#e8a3a3']
          : ['#8a94a6', '#2f6fbf', '#1f9d6b', '#c0392b'];
      // The peer's rows (`peer @node-idempotency/nestjs (Redis), …`) in orange, ours on Redis in red, the consumer
      // rows (messages per second) in purple.
      const fill = r.name.startsWith(PEER_NAME)
        ? '#d9822b'
        : r.name.includes(' on Redis')
          ? redis
          : r.name.startsWith(CONSUMER_NAME)
            ? '#8e5bb5'
            : r.name === 'baseline'
              ? baseline
              : r.name.startsWith('transactional')
                ? transactional
                : standard;
      return (
        `<text x="${LABEL - 8}" y="${y + 15}" text-anchor="end">${escape(r.config)}</text>` +
        `<rect x="${LABEL}" y="${y + 3}" width="${width.toFixed(1)}" height="${ROW - 6}" fill="${fill}"/>` +
        `<text x="${LABEL + width + 6}" y="${y + 15}">${value(r).toFixed(value(r) < 10 ? 1 : 0)} ${unit}</text>`
      );
    });
    return `<text x="10" y="${top + 18}" font-weight="bold">${title}</text>${bars.join('')}`;
  };
  const panelHeight = 40 + results.length * ROW;
  const height = panelHeight * 2 + 20;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${LABEL + BAR + 120}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    panel('Throughput (requests/s, higher is better)', (r) => r.requestsPerSecond, 'req/s', 0),
    panel('p99 latency (ms, lower is better)', (r) => r.p99, 'ms', panelHeight + 10),
    '</svg>\n',
  ].join('');
}
