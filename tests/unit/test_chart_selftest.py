"""The chart's self-test (``selftest.enabled``): ``helm test`` runs it on one node
through the exporter there (docs/troubleshooting.md, "The self-test")."""

from __future__ import annotations

import pytest

from .manifests import (
    SUPPORTED,
    exporter_container,
    helm,
    host_mounts,
    one,
    render,
    template_args,
    validate_builtin,
)

ON = ["selftest.enabled=true", "selftest.nodeName=node-a", "selftest.timeoutSeconds=180"]


def test_off_by_default_the_cgroup_tree_stays_read_only() -> None:
    docs = render()
    assert "--selftest.enabled" not in exporter_container(docs)["args"]
    assert host_mounts(docs)["/sys/fs/cgroup"]["readOnly"] is True
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not [n for n in names if n[1].endswith("-selftest")]


def test_enabled_the_exporter_runs_it_and_helm_test_asks_the_one_on_its_node() -> None:
    docs = render(ON)
    assert "--selftest.enabled" in exporter_container(docs)["args"]
    assert host_mounts(docs)["/sys/fs/cgroup"]["readOnly"] is False
    svc = one(docs, "Service", "contention-exporter-selftest")
    assert svc["spec"]["internalTrafficPolicy"] == "Local"
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["nodeName"] == "node-a"
    (c,) = pod["spec"]["containers"]
    url = f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:10366"
    assert c["args"] == ["selftest", f"--selftest.url={url}", "--selftest.timeout=180"]
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("version", [SUPPORTED[0], SUPPORTED[-1]])
def test_the_selftest_objects_validate(version: str) -> None:
    validate_builtin({"selftest": render(ON)}, version)


def test_the_selftest_needs_plain_http_to_the_exporter() -> None:
    proc = helm(*template_args([*ON, "secureMetrics.enabled=true"]), check=False)
    assert proc.returncode != 0 and "plain HTTP" in proc.stderr
