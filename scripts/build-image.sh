#!/usr/bin/env bash
# Build the contention-exporter OCI image from Debian's packages and PyPI only: no
# Docker daemon, no registry base image.
#
#   scripts/build-image.sh [--flavor core|bcc] [--out DIR]
#
#   1. wheels: the package (pip wheel .) and its runtime dependencies ([kube]) as
#      binary wheels for Debian bookworm's CPython 3.11;
#   2. root filesystem: mmdebstrap, bookworm, Essential set + deploy/image/packages-
#      <flavor>.txt; the wheels installed into /usr/local by pip run inside it (pip
#      itself is not left behind); the kubernetes client's asyncio copy
#      (kubernetes/aio, 40% of the image; the exporter uses the synchronous client
#      only, and `import kubernetes` does not load it) and docs/man/locales left
#      out; setuid/setgid bits
#      cleared (the DaemonSet sets no_new_privs anyway); written as one tar layer,
#      reproducible for a given SOURCE_DATE_EPOCH (default: the last commit's time);
#   3. image: umoci puts the layer into an OCI image layout with its config
#      (entrypoint contention-exporter, user 0:0, port 10366/tcp).
#
# Output in DIR (default build/image): oci/ (an OCI layout, tag <version>[-bcc]),
# rootfs.tar, and build-info.txt (sizes, Debian package versions, wheels). Use it:
#   skopeo copy oci:build/image/oci:0.1.0 docker://REGISTRY/contention-exporter:0.1.0
#   podman run ... oci:build/image/oci:0.1.0 ...  (docs/kubernetes.md, "The image")
# Needs root (mmdebstrap's root mode chroots to run the packages' scripts and pip).
# Installs mmdebstrap, umoci and skopeo from Debian when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
FLAVOR=core
OUT="$ROOT/build/image"
while [ $# -gt 0 ]; do
  case "$1" in
    --flavor) FLAVOR="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "build-image.sh: unknown option $1 (use --flavor core|bcc, --out DIR)" >&2; exit 2 ;;
  esac
done
case "$FLAVOR" in core|bcc) ;; *) echo "build-image.sh: --flavor core or bcc" >&2; exit 2 ;; esac
log() { printf '[build-image] %s\n' "$*" >&2; }
[ "$(id -u)" -eq 0 ] || { log "needs root (mmdebstrap root mode)"; exit 1; }
# File descriptors inherited from the caller (flock's lock files, a CI runner's pipes)
# break mmdebstrap's apt, which passes its package list on fd 11 ("Sub-process
# cat >&11 returned an error code (2)", then "apt download failed"): close all but
# stdin, stdout, stderr and bash's own script descriptor (255).
for fd in $(ls /proc/$$/fd); do
  [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ] && eval "exec $fd>&-"
done

SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
PY_VERSION=3.11  # bookworm's python3
# pip that installs the wheels inside the root filesystem (run from its wheel, not kept)
PIP_WHEEL="pip==25.0.1"

missing=()
for tool in mmdebstrap:mmdebstrap umoci:umoci skopeo:skopeo; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

VERSION="$("$VENV/bin/python" -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$ROOT/pyproject.toml")"
TAG="$VERSION"; [ "$FLAVOR" = bcc ] && TAG="$VERSION-bcc"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}"
CREATED="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
# The source revision, stamped into the wheel by setup.py (contention_build_info) and
# labelled on the image: $CONTENTION_REVISION, else the checkout's HEAD (-modified when
# tracked files differ from it), else unknown.
if [ -z "${CONTENTION_REVISION:-}" ] && REV="$(git -C "$ROOT" rev-parse --verify HEAD 2>/dev/null)"; then
  [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && REV="$REV-modified"
  CONTENTION_REVISION="$REV"
fi
export CONTENTION_REVISION="${CONTENTION_REVISION:-}"
REVISION="${CONTENTION_REVISION:-unknown}"
PACKAGES="$(grep -v '^\s*#' "$ROOT/deploy/image/packages-$FLAVOR.txt" | xargs | tr ' ' ',')"
start=$(date +%s)

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/wheels" "$WORK/pip" "$OUT"

log "wheels: contention-exporter $VERSION ($REVISION) [kube] for CPython $PY_VERSION"
"$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/wheels" "$ROOT" >&2
WHEEL="$(ls "$WORK"/wheels/contention_exporter-*.whl)"
"$VENV/bin/python" -m pip download -q --disable-pip-version-check -d "$WORK/wheels" \
  --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  "$WHEEL[kube]" >&2
"$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
  --only-binary=:all: -d "$WORK/pip" "$PIP_WHEEL" >&2

log "root filesystem: mmdebstrap $SUITE, Essential + $PACKAGES"
# Hooks run on the host with the root filesystem as $1; `chroot "$1"` runs inside it.
# merged-usr hook: /usr merged by mmdebstrap itself, so the usrmerge package (and the
# perl it pulls in) stays out. apt retries a failed download itself.
mmdebstrap --quiet --mode=root --variant=essential --include="$PACKAGES" \
  --aptopt='Acquire::Retries "5"' \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook="mkdir -p \"\$1/tmp/wheels\" \"\$1/tmp/pip\"" \
  --customize-hook="cp $WORK/wheels/*.whl \"\$1/tmp/wheels/\"" \
  --customize-hook="cp $WORK/pip/*.whl \"\$1/tmp/pip/pip.whl\"" \
  --customize-hook="chroot \"\$1\" sh -c 'python3 /tmp/pip/pip.whl/pip install --no-index --find-links /tmp/wheels --no-cache-dir --root-user-action=ignore --break-system-packages --disable-pip-version-check --quiet \"contention-exporter[kube]==$VERSION\"'" \
  --customize-hook="rm -rf \"\$1\"/usr/local/lib/python3*/dist-packages/kubernetes/aio" \
  --customize-hook="mkdir -p \"\$1/usr/local/share/contention-exporter\" && ls $WORK/wheels > \"\$1/usr/local/share/contention-exporter/wheels.txt\"" \
  --customize-hook="chroot \"\$1\" dpkg-query -W -f '\${Package} \${Version}\n' > \"$WORK/dpkg.txt\"" \
  --customize-hook="rm -rf \"\$1/tmp/wheels\" \"\$1/tmp/pip\" \"\$1\"/var/cache/* \"\$1\"/var/log/* \"\$1\"/root/.cache" \
  --customize-hook="find \"\$1\" -xdev -perm /6000 -type f -exec chmod ug-s {} +" \
  "$SUITE" "$WORK/rootfs.tar" \
  "deb $MIRROR $SUITE main" \
  "deb $MIRROR $SUITE-updates main" \
  "deb $SECURITY_MIRROR $SUITE-security main" >&2

log "OCI image: umoci, tag $TAG"
[ -d "$OUT/oci" ] || umoci init --layout "$OUT/oci"
umoci rm --image "$OUT/oci:$TAG" 2>/dev/null || true
umoci new --image "$OUT/oci:$TAG"
umoci raw add-layer --image "$OUT/oci:$TAG" \
  --history.created "$CREATED" --history.created_by "scripts/build-image.sh --flavor $FLAVOR" \
  "$WORK/rootfs.tar"
umoci config --image "$OUT/oci:$TAG" \
  --created "$CREATED" --author "contention-exporter" \
  --architecture amd64 --os linux \
  --config.user 0:0 \
  --config.workingdir / \
  --config.entrypoint /usr/local/bin/contention-exporter \
  --config.exposedports 10366/tcp \
  --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env PYTHONDONTWRITEBYTECODE=1 \
  --config.env PYTHONUNBUFFERED=1 \
  --config.label org.opencontainers.image.title=contention-exporter \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.revision=$REVISION" \
  --config.label "io.contention-exporter.flavor=$FLAVOR" \
  --no-history
umoci gc --layout "$OUT/oci"
mv "$WORK/rootfs.tar" "$OUT/rootfs-$FLAVOR.tar"

elapsed=$(( $(date +%s) - start ))
layer_bytes="$(find "$OUT/oci/blobs" -type f -printf '%s\n' | sort -n | tail -1)"
rootfs_bytes="$(stat -c %s "$OUT/rootfs-$FLAVOR.tar")"
{
  echo "image: contention-exporter:$TAG (flavor $FLAVOR), OCI layout $OUT/oci"
  echo "created: $CREATED (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
  echo "revision: $REVISION"
  echo "build seconds: $elapsed"
  echo "layer bytes (compressed): $layer_bytes"
  echo "root filesystem bytes (tar): $rootfs_bytes"
  echo "wheels:"; ls "$WORK/wheels" | sed 's/^/  /'
  echo "debian packages:"; sed 's/^/  /' "$WORK/dpkg.txt"
} >"$OUT/build-info-$FLAVOR.txt"
log "done in ${elapsed}s: layer $((layer_bytes / 1048576)) MiB compressed, root filesystem $((rootfs_bytes / 1048576)) MiB ($OUT/build-info-$FLAVOR.txt)"
echo "$OUT/oci:$TAG"
