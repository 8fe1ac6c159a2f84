// Node module hooks that run the TypeScript sources directly: `npm start` and the
// child processes of the e2e tests compile in memory, so several instances started
// at once never race over a shared build folder.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const configPath = fileURLToPath(new URL('../tsconfig.json', import.meta.url));
const { config } = ts.readConfigFile(configPath, ts.sys.readFile);
const { options } = ts.parseJsonConfigFileContent(config, ts.sys, fileURLToPath(new URL('..', import.meta.url)));
export const compilerOptions = {
  ...options,
  module: ts.ModuleKind.ESNext,
  sourceMap: false,
  inlineSourceMap: true,
  declaration: false,
};

export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    // Sources import each other as `./x.js` (NodeNext style); the file on disk is `./x.ts`.
    if (error?.code === 'ERR_MODULE_NOT_FOUND' && /^\.{1,2}\//.test(specifier) && specifier.endsWith('.js')) {
      return nextResolve(`${specifier.slice(0, -3)}.ts`, context);
    }
    throw error;
  }
}

export async function load(url, context, nextLoad) {
  if (!url.startsWith('file:') || !url.endsWith('.ts') || url.includes('/node_modules/')) {
    return nextLoad(url, context);
  }
  const fileName = fileURLToPath(url);
  const { outputText } = ts.transpileModule(await readFile(fileName, 'utf8'), { fileName, compilerOptions });
  return { format: 'module', source: outputText, shortCircuit: true };
}
