#!/usr/bin/env node
// `npx nest-idempotency inspect|stuck|release|purge`: the operator's command-line tool (docs/operator.md).
import { runOperatorCli } from './operator-cli.js';

process.exitCode = await runOperatorCli(process.argv.slice(2), {
  out: (text) => process.stdout.write(`${text}\n`),
  err: (text) => process.stderr.write(`${text}\n`),
  env: process.env,
});
