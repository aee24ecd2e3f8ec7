#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh Debian host, then run it all:
# lint, types, generated-file freshness, unit, real-kernel and end-to-end tests, and
# the VM lane (the vm-marked tests inside a pure cgroup v2 guest: scripts/vm-test.sh).
# Run as root: the kernel tests create cgroups and load BPF (they skip, saying why,
# otherwise). Extra arguments go to pytest on the host (e.g. -k throttl, -m 'not kernel');
# CONTENTION_VM_LANE=0 leaves the VM lane out of a developer's run (never under CI).
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
  rc=1
fi

step "VM lane: pure cgroup v2 guest (scripts/vm-test.sh)"
ci="$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')"
if [ "${CONTENTION_VM_LANE:-1}" = 0 ] && [[ ! "$ci" =~ ^(true|1|yes)$ ]]; then
  echo "VM lane left out (CONTENTION_VM_LANE=0)"
else
  set +e
  bash scripts/vm-test.sh
  vm_rc=$?
  set -e
  [ "$vm_rc" -eq 0 ] || rc=$(( rc == 0 ? vm_rc : rc ))
fi
exit "$rc"
