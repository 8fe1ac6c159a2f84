import { readFile, readdir } from 'node:fs/promises';
import { Controller, Get, Header, NotFoundException, Param } from '@nestjs/common';
import ts from 'typescript';
import { Public } from '../auth/api-key.guard.js';

const PAGE = new URL('./page.html', import.meta.url);
const CLIENT_SOURCES = new URL('../../src/client/', import.meta.url);

/**
 * The page a person can try, at `/`, and the library's client half it runs, served as browser modules
 * straight from `src/client` (compiled when first asked for; it imports nothing but its own files).
 */
@Controller()
@Public()
export class PageController {
  private readonly modules = new Map<string, Promise<string>>();

  @Get()
  @Header('Content-Type', 'text/html; charset=utf-8')
  page(): Promise<string> {
    return readFile(PAGE, 'utf8');
  }

  @Get('assets/client/:file')
  @Header('Content-Type', 'text/javascript; charset=utf-8')
  async clientModule(@Param('file') file: string): Promise<string> {
    const source = /^[a-z-]+\.js$/.test(file) ? file.replace(/\.js$/, '.ts') : undefined;
    if (!source || !(await readdir(CLIENT_SOURCES)).includes(source)) throw new NotFoundException();
    let compiled = this.modules.get(source);
    if (!compiled) {
      compiled = readFile(new URL(source, CLIENT_SOURCES), 'utf8').then(
        (code) => ts.transpileModule(code, { compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 } }).outputText,
      );
      this.modules.set(source, compiled);
    }
    return compiled;
  }
}
