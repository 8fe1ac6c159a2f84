import { readFile, readdir } from 'node:fs/promises';
import { Controller, Get, Header, NotFoundException, Param } from '@nestjs/common';
import ts from 'typescript';
import { Public } from '../auth/api-key.guard.js';

const PAGE = new URL('./page.html', import.meta.url);
/** The library's folders the client half is made of: its own, and what it shares with the server. */
const CLIENT_FOLDERS = new Map(
  ['client', 'shared'].map((folder) => [folder, new URL(`../../src/${folder}/`, import.meta.url)]),
);

/**
 * The page a person can try, at `/`, and the library's client half it runs, served as browser modules
 * straight from `src/client` and `src/shared` (compiled when first asked for; they import nothing but each other).
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

  @Get('assets/:folder/:file')
  @Header('Content-Type', 'text/javascript; charset=utf-8')
  async clientModule(@Param('folder') folder: string, @Param('file') file: string): Promise<string> {
    const sources = CLIENT_FOLDERS.get(folder);
    const source = /^[a-z-]+\.js$/.test(file) ? file.replace(/\.js$/, '.ts') : undefined;
    if (!sources || !source || !(await readdir(sources)).includes(source)) throw new NotFoundException();
    const path = `${folder}/${source}`;
    let compiled = this.modules.get(path);
    if (!compiled) {
      compiled = readFile(new URL(source, sources), 'utf8').then(
        (code) =>
          ts.transpileModule(code, {
            compilerOptions: { module: ts.ModuleKind.ES2022, target: ts.ScriptTarget.ES2022 },
          }).outputText,
      );
      this.modules.set(path, compiled);
    }
    return compiled;
  }
}
