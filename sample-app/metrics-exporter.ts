import { metrics } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import { MeterProvider } from '@opentelemetry/sdk-metrics';

/**
 * Serves the process's OpenTelemetry metrics, the module's among them, for Prometheus to scrape at
 * `http://host:port/metrics`. Called before the Nest application is created: the module acquires its instruments
 * then, from the meter provider registered by that time. Resolves once the endpoint listens; `shutdown()` stops it.
 */
export async function serveMetrics(port: number): Promise<MeterProvider> {
  const exporter = new PrometheusExporter({ port, preventServerStart: true });
  await exporter.startServer();
  const provider = new MeterProvider({ readers: [exporter] });
  metrics.setGlobalMeterProvider(provider);
  return provider;
}
