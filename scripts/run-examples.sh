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

tarball="$PWD/.pack/nest-idempotency.tgz"
# Each example runs from a copy outside this repository, as an adopter's application would: inside it, Node would
# also resolve packages from the repository's own node_modules (TypeORM and pg among them), which an adopter has not.
workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
for example in examples/*/; do
  name="$(basename "$example")"
  echo "== $example (in $workdir/$name)"
  cp -R "$example" "$workdir/$name"
  rm -rf "$workdir/$name/node_modules"
  (
    cd "$workdir/$name"
    npm pkg set "dependencies.nest-idempotency=file:$tarball"
    # No lock file: the tarball changes with every build, and its integrity with it.
    npm install --no-audit --no-fund --no-package-lock
    npm test
  )
done
