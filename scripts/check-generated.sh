#!/usr/bin/env bash
# Generated files are committed so users can take them straight from the repo; this
# fails when one is stale (regenerate with the commands it prints).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${CONTENTION_VENV:-$ROOT/.venv}"
CE="$VENV/bin/contention-exporter"
rc=0
"$CE" rules generate --check || { echo "stale rules: run 'contention-exporter rules generate'" >&2; rc=1; }
"$CE" dashboards generate --check || { echo "stale dashboards: run 'contention-exporter dashboards generate'" >&2; rc=1; }
"$VENV/bin/python" -m tests.support.promtool_tests --check \
  || { echo "stale promtool tests: run 'python -m tests.support.promtool_tests'" >&2; rc=1; }
# docs/metrics.md's tables, generated from the metric catalog (exporter/catalog).
"$VENV/bin/python" -m tests.support.metrics_doc --check \
  || { echo "stale metric tables: run 'python -m tests.support.metrics_doc'" >&2; rc=1; }
# The Helm chart's copies of the rules/dashboards and the kustomize base rendered from
# the chart (needs helm: scripts/setup-kube-tools.sh).
"$VENV/bin/python" scripts/generate-deploy.py --check \
  || { echo "stale chart files or kustomize base: run 'scripts/generate-deploy.py'" >&2; rc=1; }
# The committed CO-RE object: rebuilt here from the same sources must be identical.
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
if bash scripts/build-bpf.sh "$TMP/sched_probe.bpf.o"; then
  cmp -s "$TMP/sched_probe.bpf.o" bpf/sched_probe.bpf.o || {
    echo "stale bpf/sched_probe.bpf.o: run scripts/build-bpf.sh and commit it" >&2; rc=1; }
else
  echo "cannot rebuild bpf/sched_probe.bpf.o (scripts/setup.sh --build-bpf)" >&2; rc=1
fi
exit "$rc"
