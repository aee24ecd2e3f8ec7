#!/usr/bin/env bash
# Prerequisites of the scheduler probe (root only).
#
#   setup-probe.sh VENV          what this node needs: libbpf for the CO-RE probe;
#                                the BCC fallback only when the kernel has no BTF
#   setup-probe.sh VENV --bcc    the BCC fallback too, whatever the kernel (the tests
#                                exercise both loaders)
#
# CO-RE: Debian's libbpf1 (the precompiled object ships in the package; no compiler,
# no headers). BCC fallback:
#   1. Debian's python3-bpfcc, linked into the venv (BCC is not on PyPI);
#   2. kernel headers BCC can compile against: the running kernel's own if the
#      distribution has them, else the nearest Debian linux-headers (safe because the
#      probe reads only tracepoint fields, whose layout comes from tracefs at run time);
#   3. tracefs mounted at /sys/kernel/tracing.
# Headers are unpacked under /var/cache/contention-exporter/kernel-headers/ and
# /var/cache/contention-exporter/kernel-source points at them (the exporter reads it).
set -euo pipefail
VENV="$1"
WANT_BCC=0
[ "${2:-}" = "--bcc" ] && WANT_BCC=1
CACHE=/var/cache/contention-exporter
log() { printf '[setup-probe] %s\n' "$*" >&2; }

export DEBIAN_FRONTEND=noninteractive
# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
if ! dpkg -s libbpf1 >/dev/null 2>&1; then
  apt_update
  log "apt-get install libbpf1"
  apt_get install -y -qq --no-install-recommends libbpf1 >&2
fi
if [ -e /sys/kernel/btf/vmlinux ] && [ "$WANT_BCC" -eq 0 ]; then
  log "kernel BTF present: the CO-RE probe needs nothing else (no BCC, no headers)"
  exit 0
fi
[ -e /sys/kernel/btf/vmlinux ] || log "no /sys/kernel/btf/vmlinux: preparing the BCC fallback"

if ! dpkg -s python3-bpfcc >/dev/null 2>&1; then
  apt_update
  log "apt-get install python3-bpfcc"
  apt_get install -y -qq --no-install-recommends python3-bpfcc >&2
fi

# Link bcc into the venv (a symlink, not a .pth of all of dist-packages, so Debian's
# other Python packages do not shadow the pinned ones).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ ! -e "$SITE/bcc" ]; then
  ln -s /usr/lib/python3/dist-packages/bcc "$SITE/bcc"
fi
"$VENV/bin/python" -c 'import bcc' || { log "bcc does not import in the venv"; exit 1; }

# tracefs
if [ ! -e /sys/kernel/tracing/events/sched ]; then
  log "mounting tracefs at /sys/kernel/tracing"
  mount -t tracefs tracefs /sys/kernel/tracing
fi

# kernel headers
KREL="$(uname -r)"
mkdir -p "$CACHE"
if [ -e "/lib/modules/$KREL/build/include" ]; then
  ln -sfn "/lib/modules/$KREL/build" "$CACHE/kernel-source"
  log "using the running kernel's headers"
  exit 0
fi
if [ -e "$CACHE/kernel-source/include/linux/sched.h" ]; then
  log "kernel headers already prepared: $(readlink -f "$CACHE/kernel-source")"
  exit 0
fi
apt_update || true
if apt_get install -y -qq --no-install-recommends "linux-headers-$KREL" >&2 2>/dev/null; then
  ln -sfn "/lib/modules/$KREL/build" "$CACHE/kernel-source"
  exit 0
fi
# Nearest Debian headers: the highest-versioned linux-headers-*-<arch> on offer.
ARCH="$(dpkg --print-architecture)"
# Names look like linux-headers-6.1.0-57-amd64 or linux-headers-6.12.111+deb12-amd64.
CAND="$(apt-cache search --names-only "^linux-headers-[0-9][0-9.]*[-+][^ ]*-${ARCH}\$" \
  | awk '{print $1}' | grep -Ev -- '-(cloud|rt)-' | sort -V | tail -1)"
if [ -z "$CAND" ]; then
  log "no linux-headers package found for $ARCH"; exit 1
fi
VER="${CAND#linux-headers-}"; VER="${VER%-$ARCH}"
COMMON="linux-headers-${VER}-common"
log "running kernel $KREL has no headers package; using the nearest: $CAND + $COMMON"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
( cd "$WORK" && apt_get download "$CAND" "$COMMON" >&2 )
mkdir -p "$WORK/x"
for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$WORK/x"; done
DEST="$CACHE/kernel-headers/$VER"
rm -rf "$DEST"; mkdir -p "$DEST"
# -common first, then the arch tree on top (its generated headers and config win).
cp -a "$WORK/x/usr/src/linux-headers-${VER}-common/." "$DEST/"
cp -a "$WORK/x/usr/src/linux-headers-${VER}-${ARCH}/." "$DEST/"
ln -sfn "$DEST" "$CACHE/kernel-source"
log "kernel headers ready in $DEST"
