#!/usr/bin/env bash
# Set up and run contention-exporter on this host (host mode: no Kubernetes needed).
# As root it also prepares the scheduler probe: libbpf for the precompiled CO-RE probe
# when the kernel has BTF (nothing to download or compile), else BCC and kernel
# headers for the fallback; without root it runs the usage and stall layers only and
# says why the probe is off.
# Arguments go to the exporter, e.g.: scripts/run.sh --web.listen-address :10366
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$(id -u)" -eq 0 ]; then
  bash "$ROOT/scripts/setup.sh" --probe
else
  bash "$ROOT/scripts/setup.sh"
fi
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
if [ -e /var/cache/contention-exporter/kernel-source ]; then
  export BCC_KERNEL_SOURCE="${BCC_KERNEL_SOURCE:-/var/cache/contention-exporter/kernel-source}"
fi
exec "$VENV/bin/contention-exporter" "$@"
