import { ConsoleLogger, type LogLevel } from '@nestjs/common';

/**
 * A Nest logger that prints nothing and keeps warnings and errors for the test to read, each as the line Nest
 * would have printed without its timestamp: `ERROR [Idempotency] Claiming key … failed; …`.
 */
export class RecordingLogger extends ConsoleLogger {
  readonly warnings: string[] = [];
  readonly errors: string[] = [];

  protected override printMessages(messages: unknown[], context = '', logLevel: LogLevel = 'log'): void {
    const kept =
      logLevel === 'error' || logLevel === 'fatal' ? this.errors : logLevel === 'warn' ? this.warnings : undefined;
    for (const message of messages) kept?.push(`${logLevel.toUpperCase()} [${context}] ${String(message)}`);
  }

  protected override printStackTrace(): void {}
}
