import type { Logger } from '@nestjs/common';

/** Logs what is worth saying once per process (per endpoint, or per set-up problem), however often it happens. */
export class OnceLog {
  private readonly said = new Set<string>();

  constructor(private readonly logger: Logger) {}

  warn(about: string, message: string): void {
    if (this.first(about)) this.logger.warn(message);
  }

  error(about: string, message: string): void {
    if (this.first(about)) this.logger.error(message);
  }

  private first(about: string): boolean {
    if (this.said.has(about)) return false;
    this.said.add(about);
    return true;
  }
}
