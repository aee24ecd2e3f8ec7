#!/usr/bin/env bash
# The VM lane: the vm-marked tests inside a pure cgroup v2 guest (Debian 6.12 kernel
# under qemu, TCG). Installs what it needs (scripts/setup-vm.sh), boots, runs, returns
# the guest pytest's status. A developer's run without root/qemu/kernel skips with the
# reason; under CI=true that is a failure. Options: scripts/vm-test.sh --help.
# Run it under the kernel lock when other real-kernel work shares the machine:
#   flock /tmp/contention-kernel.lock scripts/vm-test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
[ -x "$VENV/bin/python" ] || bash scripts/setup.sh --test
exec "$VENV/bin/python" -m tests.vm.lane "$@"
