import { ConsoleLogger } from '@nestjs/common';

/** A Nest logger that keeps warnings and errors for the test to read, and prints nothing. */
export class RecordingLogger extends ConsoleLogger {
  readonly warnings: string[] = [];
  readonly errors: string[] = [];

  override warn(message: unknown, ...rest: unknown[]): void {
    this.warnings.push([message, ...rest].map(String).join(' '));
  }

  override error(message: unknown, ...rest: unknown[]): void {
    this.errors.push([message, ...rest].map(String).join(' '));
  }

  override log(): void {}
}
