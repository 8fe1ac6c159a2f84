#!/usr/bin/env bash
# Runs each application under examples/ as an adopter would: the package packed by `npm pack` (what npm would
# publish), installed into the example beside its own dependencies, then the example's own checks and tests.
# The examples need a PostgreSQL server: DATABASE_URL (CI sets it to the machine's server).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${DATABASE_URL:-}" ]; then
  echo "examples: skipped, they need DATABASE_URL (a PostgreSQL server they may create databases on)"
  exit 0
fi

mkdir -p .pack
rm -f .pack/*.tgz
tarball="$(npm pack --silent --pack-destination .pack | tail -n 1)"
# A fixed name, so that the examples' package.json can point at it.
mv ".pack/$tarball" .pack/nest-idempotency.tgz

for example in examples/*/; do
  echo "== $example"
  (
    cd "$example"
    # No lock file: the tarball changes with every build, and its integrity with it.
    rm -rf node_modules/nest-idempotency
    npm install --no-audit --no-fund --no-package-lock
    npm test
  )
done
