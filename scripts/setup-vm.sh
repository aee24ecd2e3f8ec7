#!/usr/bin/env bash
# Prerequisites of the VM lane (root only; see docs/testing.md):
#   1. Debian's qemu (TCG: no KVM needed), kmod (depmod), busybox-static (virtme-ng's
#      initramfs), e2fsprogs (the guest's scratch disk) and any extra Debian packages
#      given with --packages (the guest shares the host's userland, so what the host
#      has, the guest has);
#   2. virtme-ng from PyPI, pinned, in its own venv under the cache;
#   3. the seccomp profile podman and CRI-O apply by default, as Debian ships it
#      (/usr/share/containers/seccomp.json of golang-github-containers-common), unpacked
#      from the downloaded package into containers-common/ (not installed: it would pull
#      in iptables and the CNI plugins); the guest's container test runs the image
#      under it. Best effort: without it only that test skips (fails under CI);
#   4. a Debian 6.12 kernel: the newest linux-image-6.12.*-amd64 the archive offers
#      (else the newest one already cached), unpacked with its modules, and the
#      matching linux-headers for BCC inside the guest.
# Everything lands in /var/cache/contention-exporter/ so a rerun downloads nothing.
# On success prints the kernel's directory (vmlinuz, lib/modules/<release>) on stdout.
set -euo pipefail

CACHE=/var/cache/contention-exporter
VM="$CACHE/vm"
VIRTME_NG_VERSION=1.42
KERNEL_SERIES=6.12
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --packages) read -r -a more <<<"$2"; EXTRA+=("${more[@]}"); shift 2 ;;
    *) echo "setup-vm.sh: unknown option $1 (use --packages 'a b')" >&2; exit 2 ;;
  esac
done
log() { printf '[setup-vm] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, and the guest tests run as root)"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 hosts are supported (found $(uname -m))"
ARCH="$(dpkg --print-architecture)"

# shellcheck source=scripts/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
APT_UPDATED=0
update_once() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    apt_update || log "apt-get update failed; using the package lists there are"
    APT_UPDATED=1
  fi
}
missing=()
for p in qemu-system-x86 kmod busybox-static e2fsprogs "${EXTRA[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  update_once
  log "apt-get install ${missing[*]}"
  apt_get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# virtme-ng, pinned, in a venv of its own (it is a host tool, not a project dependency).
VNG_VENV="$VM/virtme-ng-$VIRTME_NG_VERSION"
if [ ! -x "$VNG_VENV/bin/vng" ]; then
  log "pip install virtme-ng==$VIRTME_NG_VERSION into $VNG_VENV"
  rm -rf "$VNG_VENV"
  python3 -m venv "$VNG_VENV" >&2
  "$VNG_VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "virtme-ng==$VIRTME_NG_VERSION" >&2
fi
ln -sfn "$VNG_VENV" "$VM/virtme-ng"

# The containers/common seccomp profile, from the package as Debian ships it.
SECCOMP_PKG=golang-github-containers-common
SECCOMP_DIR="$VM/containers-common"
fetch_seccomp_profile() {
  local ver work
  ver="$(apt-cache policy "$SECCOMP_PKG" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
    update_once
    ver="$(apt-cache policy "$SECCOMP_PKG" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  fi
  [ -n "$ver" ] && [ "$ver" != "(none)" ] || return 1
  [ "$(cat "$SECCOMP_DIR/version" 2>/dev/null)" = "$ver" ] && return 0
  work="$(mktemp -d)"
  log "downloading $SECCOMP_PKG $ver for its seccomp profile"
  if (cd "$work" && apt_get download "$SECCOMP_PKG=$ver" >&2 2>/dev/null) \
      && dpkg -x "$work"/*.deb "$work/x" \
      && [ -s "$work/x/usr/share/containers/seccomp.json" ]; then
    rm -rf "$SECCOMP_DIR"; mkdir -p "$SECCOMP_DIR"
    cp "$work/x/usr/share/containers/seccomp.json" "$SECCOMP_DIR/seccomp.json"
    echo "$ver" >"$SECCOMP_DIR/version"
    rm -rf "$work"
    return 0
  fi
  rm -rf "$work"
  return 1
}
if ! fetch_seccomp_profile; then
  if [ -s "$SECCOMP_DIR/seccomp.json" ]; then
    log "using the cached $SECCOMP_PKG $(cat "$SECCOMP_DIR/version") seccomp profile"
  else
    log "no $SECCOMP_PKG package could be downloaded: the seccomp container test skips"
  fi
fi

# The kernel: newest linux-image-<series>.N+debXX-<arch> (signed) the archive offers.
newest_offered() {
  apt-cache search --names-only "^linux-image-${KERNEL_SERIES}\.[0-9]+\+deb[0-9]+-${ARCH}\$" \
    | awk '{print $1}' | sort -V | tail -1
}
CAND="$(newest_offered)"
if [ -z "$CAND" ]; then
  update_once
  CAND="$(newest_offered)"
fi
KERNELS="$VM/kernels"
mkdir -p "$KERNELS"
fetch_kernel() {  # $1 = package name; unpacks into $KERNELS/<release>
  local pkg="$1" rel work dest ver
  rel="${pkg#linux-image-}"
  dest="$KERNELS/$rel"
  [ -e "$dest/.complete" ] && return 0
  work="$(mktemp -d)"
  ver="${rel%-"$ARCH"}"
  log "downloading $pkg and its headers"
  if ! (cd "$work" && apt_get download "$pkg" "linux-headers-$rel" \
        "linux-headers-${ver}-common" >&2 2>/dev/null); then
    rm -rf "$work"; return 1
  fi
  rm -rf "$dest"; mkdir -p "$dest/x"
  for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest/x"; done
  mv "$dest/x/boot/vmlinuz-$rel" "$dest/vmlinuz"
  mkdir -p "$dest/lib/modules"
  mv "$dest/x/lib/modules/$rel" "$dest/lib/modules/$rel"
  # Headers as BCC wants one tree: -common first, the arch tree on top.
  mkdir -p "$dest/headers"
  cp -a "$dest/x/usr/src/linux-headers-${ver}-common/." "$dest/headers/"
  cp -a "$dest/x/usr/src/linux-headers-${rel}/." "$dest/headers/"
  rm -rf "$dest/x" "$work"
  depmod -b "$dest" "$rel"
  echo "$rel" >"$dest/.complete"
}
if [ -n "$CAND" ] && fetch_kernel "$CAND"; then
  REL="${CAND#linux-image-}"
else
  # Offline, or the archive moved on: the newest kernel already unpacked here.
  REL="$(find "$KERNELS" -mindepth 2 -maxdepth 2 -name .complete -printf '%h\n' 2>/dev/null \
    | xargs -r -n1 basename | sort -V | tail -1)"
  [ -n "$REL" ] || die "no linux-image-${KERNEL_SERIES} package could be downloaded, none cached"
  log "using the cached kernel $REL (could not download ${CAND:-a newer one})"
fi
# Keep only the kernel in use: each one is ~250 MB unpacked.
for d in "$KERNELS"/*; do
  [ "$(basename "$d")" = "$REL" ] || rm -rf "$d"
done
ln -sfn "$KERNELS/$REL" "$VM/kernel"
log "kernel $REL ready"
echo "$KERNELS/$REL"
