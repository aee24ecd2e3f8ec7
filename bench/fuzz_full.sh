#!/usr/bin/env bash
# The five seeded fuzz runs at their full sizes (bench/README.md, "fuzz runs"), one after
# the other, with the project's venv. The suite (tests/fuzz/, `make fuzz`) runs the same
# fuzzers, same seed, at smaller sizes; this is the campaign behind the README's figures.
#
#   bench/fuzz_full.sh              seed 16, as in bench/README.md
#   bench/fuzz_full.sh --seed 17    another seed
#   make fuzz-full                  the same
#
# Each run prints its figures; then its wall time. Exits non-zero if any run failed,
# after running the others. As root, the tree run drops CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH (util-linux setpriv) so unreadable files are really unreadable.
# No kernel access: the runs use fixture trees and temporary files (on /dev/shm).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${CONTENTION_PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "bench/fuzz_full.sh: no venv python at $PY (run scripts/setup.sh first, or set CONTENTION_PYTHON)" >&2
  exit 2
fi
SEED=16
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) SEED="$2"; shift 2 ;;
    *) echo "bench/fuzz_full.sh: unknown option $1 (use --seed N)" >&2; exit 2 ;;
  esac
done

unprivileged=()
if [ "$(id -u)" -eq 0 ]; then
  caps=-dac_override,-dac_read_search
  unprivileged=(setpriv "--bounding-set=$caps" "--inh-caps=$caps")
fi

# name, module, size option and size: the full sizes of bench/README.md's table
RUNS=(
  "parsers parser_fuzz --inputs 260000"
  "read-path reader_fuzz --inputs 40000"
  "trees tree_fuzz --trees 600"
  "config config_fuzz --inputs 2000"
  "pods kube_fuzz --inputs 20000"
)
status=0
summary=()
cd "$ROOT" || exit 2
for run in "${RUNS[@]}"; do
  read -r name module opt size <<<"$run"
  cmd=("$PY" -m "tests.support.$module" "$opt" "$size" --seed "$SEED")
  [ "$module" = tree_fuzz ] && cmd=("${unprivileged[@]}" "${cmd[@]}")
  echo "== $name: ${cmd[*]}" >&2
  start=$(date +%s.%N)
  "${cmd[@]}"
  rc=$?
  wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [ "$rc" -eq 0 ] || status=1
  summary+=("$(printf '%-10s %8s s  %s' "$name" "$wall" "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")")
done
echo "== full fuzz runs, seed $SEED (wall time)" >&2
printf '%s\n' "${summary[@]}" >&2
exit "$status"
