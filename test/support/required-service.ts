/**
 * A service a suite needs beside PostgreSQL (a broker, a pooler): found, or skipped with the reason. Where it is
 * missing the suites that need it are skipped, saying why; under `CI=true` a missing service fails the file instead,
 * so that a green CI run means they ran.
 */
export type RequiredService = { skipped?: never } | { skipped: string };

/** Looks for the service once (`whyMissing` says why it cannot be used, or `undefined`). */
export async function requireService(
  name: string,
  whyMissing: () => Promise<string | undefined>,
): Promise<RequiredService> {
  const missing = await whyMissing();
  if (missing === undefined) return {};
  if (process.env.CI === 'true') throw new Error(`The suites on ${name} must run in CI, and cannot: ${missing}`);
  console.warn(`The suites on ${name} are skipped: ${missing}`);
  return { skipped: missing };
}

/** `describe`, skipped (with the reason in its name) where `service` is missing. */
export function describeWith(service: RequiredService, name: string, body: () => void): void {
  if (service.skipped === undefined) describe(name, body);
  else describe.skip(`${name} (skipped: ${service.skipped})`, body);
}
