#!/usr/bin/env bash
# Run every benchmark in bench/ that exists, one after the other, with the project's
# venv: sampler_bench.py (the sampler and the scrape path), cardinality.py (series and
# bytes per container), probe_bench.py (the scheduler probe), exporter_overhead.py (the
# real exporter's CPU and RSS, probe on vs off), http_load.py (the HTTP front under
# many, idle and slow clients) and kube_bench.py (the Kubernetes resolver's per-event
# costs).
#
#   bench/run.sh            tables on stdout
#   bench/run.sh --json     JSON, one document per benchmark
#
# Extra arguments are passed to every benchmark. Exits non-zero if any benchmark
# failed, after running the others. Benchmarks that need root (the probe, the
# exporter overhead) say so; run those under flock /tmp/contention-kernel.lock when
# other real-kernel work may share the machine.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${CONTENTION_PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "bench/run.sh: no venv python at $PY (run scripts/setup.sh first, or set CONTENTION_PYTHON)" >&2
  exit 2
fi

status=0
ran=0
for name in sampler_bench.py cardinality.py probe_bench.py exporter_overhead.py http_load.py kube_bench.py; do
  script="$HERE/$name"
  [ -f "$script" ] || continue
  ran=$((ran + 1))
  echo "== $name" >&2
  if ! (cd "$ROOT" && "$PY" "$script" "$@"); then
    echo "bench/run.sh: $name failed" >&2
    status=1
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "bench/run.sh: no benchmark scripts found in $HERE" >&2
  exit 2
fi
exit "$status"
