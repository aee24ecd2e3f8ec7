#!/usr/bin/env bash
# Build the CO-RE scheduler probe: bpf/sched_probe.bpf.c -> bpf/sched_probe.bpf.o.
#
# The object is committed (like cilium/ebpf's bpf2go output) and ships in the wheel,
# so no node needs a compiler; CI rebuilds it on a clean clone and fails on any
# difference (scripts/check-generated.sh). For that the build must be byte-for-byte
# reproducible on any machine and kernel:
#   - no vmlinux.h: the kernel types come from bpf/sched_probe_kernel.h (hand-written,
#     CO-RE relocated at load time), so the running kernel does not matter;
#   - Debian's clang and libbpf-dev (bpf_helpers.h), pinned by the distribution
#     release; their versions are printed, and a different compiler may give a
#     different object (rebuild and commit it then);
#   - relative source paths from the repository root, and DWARF stripped afterwards
#     (llvm-strip -g keeps .BTF and .BTF.ext, which libbpf needs): no build directory
#     or user path ends up in the object.
#
#   scripts/build-bpf.sh            rebuild bpf/sched_probe.bpf.o in place
#   scripts/build-bpf.sh OUT.o      build to another path (the freshness check does)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${1:-bpf/sched_probe.bpf.o}"
CLANG="${CLANG:-clang}"
STRIP="${LLVM_STRIP:-llvm-strip}"
for tool in "$CLANG" "$STRIP"; do
  command -v "$tool" >/dev/null || {
    echo "build-bpf: $tool not found (scripts/setup.sh --build-bpf installs clang, llvm, libbpf-dev)" >&2
    exit 2
  }
done
[ -e /usr/include/bpf/bpf_helpers.h ] || {
  echo "build-bpf: /usr/include/bpf/bpf_helpers.h not found (apt-get install libbpf-dev)" >&2
  exit 2
}
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# -target bpfel: the same object for every little-endian node (amd64, arm64).
"$CLANG" -target bpfel -g -O2 -Wall -Werror -nostdinc -isystem /usr/include \
  -fdebug-prefix-map="$ROOT"=. -Ibpf -c bpf/sched_probe.bpf.c -o "$TMP/probe.o"
"$STRIP" -g "$TMP/probe.o" -o "$TMP/stripped.o"
mv "$TMP/stripped.o" "$OUT"
echo "build-bpf: $OUT ($("$CLANG" --version | head -1); libbpf-dev $(dpkg-query -W -f '${Version}' libbpf-dev 2>/dev/null || echo '?'))" >&2
