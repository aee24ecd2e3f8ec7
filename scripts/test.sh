#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian host, then run it all:
# lint, types, generated-file freshness, unit, real-kernel and end-to-end tests.
# Run as root: the kernel tests create cgroups and load BPF (they skip, saying why,
# otherwise). Extra arguments go to pytest (e.g. -k throttl, -m 'not kernel').
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/setup.sh --test
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
export PATH="$VENV/bin:$PATH"
if [ -e /var/cache/contention-exporter/kernel-source ]; then
  export BCC_KERNEL_SOURCE="${BCC_KERNEL_SOURCE:-/var/cache/contention-exporter/kernel-source}"
fi

step() { printf '\n==> %s\n' "$*"; }

step "ruff"
ruff check .
ruff format --check .
step "mypy"
mypy

if [ -x scripts/check-generated.sh ]; then
  step "generated files are fresh"
  bash scripts/check-generated.sh
fi

step "pytest"
set +e
pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
