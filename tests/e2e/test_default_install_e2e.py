"""The default install's scrape and alert routing with the real programs, on 127.0.0.1
(tests/e2e/default_install.py):

* the exporter started exactly as the chart's DaemonSet starts it (Kubernetes mode
  against the API emulator, reading the v2-systemd fixture tree through the
  DaemonSet's hostPath mounts), scraped by a real Prometheus with the scrape job the
  Prometheus Operator writes for the chart's ServiceMonitor: the target carries the
  operator's labels without the exporter pod's namespace/pod/container, and no series
  names the exporter's pod; with the chart's labeldrop taken out (the "before" of
  issue 24) the same scrape stamps the exporter's pod on every unnamed cgroup;
* kube-prometheus-stack's default Alertmanager configuration with a webhook root
  receiver: a warning reaches the webhook, Watchdog does not, and InfoInhibitor mutes
  an info alert in its namespace only.

Every process is started here and stopped by its PID. No kernel access: the exporter
reads a fixture tree, with the probe off (``probe.loader=off``).
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from labs.exporter_proc import free_port, terminate
from tests.e2e import default_install as di
from tests.e2e.chain import ALERTMANAGER, PROMETHEUS, Proc, Webhook, http_get, wait_until
from tests.support.kube_emulator import Emulator, kubeconfig
from tests.support.kube_emulator import pod as api_pod

# any_load: fixture trees and the probe off; nothing here measures time or a share
pytestmark = [pytest.mark.e2e, pytest.mark.any_load, pytest.mark.timeout(120)]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "v2-systemd"
NODE = "node-a"
# One container of the fixture tree that the API names (the golden v2-systemd-named
# pair): its series carry namespace/pod/container of their own.
NAMED = ("shop", "api-7d9f8c6b5-x2k4q", "app")
NAMED_UID = "3f9d2a41-6c0e-4b7a-9f15-2d8c7e41b0a3"
NAMED_CID = "82d09898ea003cbf23a5fd036c36c9d616ac203ed0ca1504788be5ab14e37e3a"
SERIES = "contention_cpu_usage_seconds_total"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    """The API emulator with the named fixture pod on NODE; its kubeconfig."""
    emu = Emulator()
    try:
        emu.start()
        ns, name, container = NAMED
        emu.create(
            api_pod(name, NAMED_UID, ns=ns, node=NODE, containers=[(container, {}, NAMED_CID)])
        )
        yield kubeconfig(tmp_path / "kubeconfig", emu.port)
    finally:
        emu.close()


def _start_exporter(inv: di.Invocation, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as f:
        return subprocess.Popen(
            inv.argv, env=inv.env, cwd=inv.cwd, stdin=subprocess.DEVNULL, stdout=f,
            stderr=subprocess.STDOUT, close_fds=True,
        )  # fmt: skip


def _prometheus(tmp: Path, name: str, job: dict[str, Any]) -> tuple[Proc, str]:
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [job]}
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    port = free_port()
    proc = Proc(
        name,
        [
            PROMETHEUS,
            f"--config.file={path}",
            f"--storage.tsdb.path={tmp / (name + '-data')}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        str(tmp / f"{name}.log"),
    )
    proc.start()
    return proc, f"http://127.0.0.1:{port}"


def _api(base: str, path: str, **params: str) -> Any:
    status, body = http_get(f"{base}{path}?{urllib.parse.urlencode(params)}", 5)
    doc = json.loads(body)
    assert status == 200 and doc["status"] == "success", body[:500]
    return doc["data"]


def _series(base: str) -> list[dict[str, str]]:
    return [r["metric"] for r in _api(base, "/api/v1/query", query=SERIES)["result"]]


def _wait_scraped(proc: Proc, base: str, exporter_log: Path) -> None:
    """Until Prometheus has the named container's series and unnamed cgroups' ones."""

    def scraped() -> bool:
        series = _series(base)
        named = any((s.get("namespace"), s.get("pod"), s.get("container")) == NAMED for s in series)
        return named and any("cgroup" in s for s in series)

    wait_until(
        f"{proc.name}: the named container's series and the unnamed ones",
        scraped,
        30,
        interval=0.3,
        detail=lambda: proc.log_tail() + "\n--- exporter ---\n" + exporter_log.read_text()[-2000:],
    )


def _own_pod_count(base: str, pod: di.PodMeta) -> int:
    """Series of any family carrying the exporter pod's own namespace, pod and container."""
    q = f'count({{namespace="{pod.namespace}", pod="{pod.name}", container="{pod.container}"}})'
    result = _api(base, "/api/v1/query", query=q)["result"]
    return int(float(result[0]["value"][1])) if result else 0


def _without_labeldrop(monitor: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(monitor)
    ep = out["spec"]["endpoints"][0]
    ep["relabelings"] = [r for r in ep["relabelings"] if r.get("action") != "labeldrop"]
    assert len(ep["relabelings"]) == len(monitor["spec"]["endpoints"][0]["relabelings"]) - 1
    return out


def test_no_series_names_the_exporters_own_pod(
    tmp_path: Path, api: str, record_property: Any
) -> None:
    objects = di.render_chart({"probe": {"loader": "off"}})
    listen = f"127.0.0.1:{free_port()}"
    inv = di.exporter_from_daemonset(
        objects, workdir=tmp_path / "pod", node_name=NODE, kubeconfig=api, listen=listen,
        host_root=FIXTURE,
    )  # fmt: skip
    assert "--no-probe" in inv.argv and "--kubernetes" in inv.argv
    sm, svc = di.one_of(objects, "ServiceMonitor"), di.one_of(objects, "Service")

    def job(monitor: dict[str, Any]) -> dict[str, Any]:
        return di.operator_scrape_config(
            monitor, target=listen, pod=inv.pod, service=svc, scrape_interval="1s"
        )

    exporter = _start_exporter(inv, tmp_path / "exporter.log")
    procs: list[Proc] = []
    try:
        after, after_url = _prometheus(tmp_path, "after", job(sm))
        before, before_url = _prometheus(tmp_path, "before", job(_without_labeldrop(sm)))
        procs = [after, before]
        for proc, url in ((after, after_url), (before, before_url)):
            _wait_scraped(proc, url, tmp_path / "exporter.log")
        (target,) = _api(after_url, "/api/v1/targets")["activeTargets"]
        assert target["health"] == "up", target
        assert target["labels"] == {
            "endpoint": "metrics",
            "instance": NODE,
            "job": "contention-exporter",
            "node": NODE,
            "service": svc["metadata"]["name"],
        }
        (old_target,) = _api(before_url, "/api/v1/targets")["activeTargets"]
        assert (old_target["labels"]["pod"], old_target["labels"]["container"]) == (
            inv.pod.name,
            inv.pod.container,
        )
        after_count, before_count = (
            _own_pod_count(after_url, inv.pod),
            _own_pod_count(before_url, inv.pod),
        )
        unnamed = [s for s in _series(before_url) if "cgroup" in s]
        total = _api(after_url, "/api/v1/query", query='count({job="contention-exporter"})')[
            "result"
        ]
        print(
            f"\nseries carrying the exporter pod's own labels ({inv.pod.namespace}/"
            f"{inv.pod.name}/{inv.pod.container}) of {total[0]['value'][1]} scraped: "
            f"before (no labeldrop) {before_count}, after (the chart's ServiceMonitor) "
            f"{after_count}"
        )
        for d in inv.deviations:
            print("deviation:", d)
        record_property("own_pod_series_before", before_count)
        record_property("own_pod_series_after", after_count)
        assert after_count == 0
        assert before_count > 0 and unnamed
        assert all(s["pod"] == inv.pod.name for s in unnamed)
        ns, pod, container = NAMED
        for url in (after_url, before_url):  # a series naming its container keeps its own
            named = [s for s in _series(url) if s.get("pod") == pod]
            assert named and all((s["namespace"], s["container"]) == (ns, container) for s in named)
        assert all(
            not {"namespace", "pod", "container"} & set(s)
            for s in _series(after_url)
            if "cgroup" in s
        )
    finally:
        for proc in procs:
            proc.stop()
        terminate(exporter)


# --- kube-prometheus-stack's Alertmanager ----------------------------------------------


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[str, Webhook]]:
    """Alertmanager with the stack's default config, a webhook root and time scaled
    as the lane scales it (rules every 2 s instead of 1m)."""
    webhook = Webhook().start()
    cfg = di.kps_alertmanager_config(webhook_url=webhook.url, time_scale=2 / 60)
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    port = free_port()
    am = Proc(
        "alertmanager",
        [
            ALERTMANAGER,
            f"--config.file={path}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        str(tmp_path / "alertmanager.log"),
    )
    am.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            "Alertmanager /-/ready",
            lambda: am.alive() and http_get(url + "/-/ready", 1)[0] == 200,
            30,
            detail=am.log_tail,
        )
        yield url, webhook
    finally:
        am.stop()
        webhook.stop()


def _post(url: str, alerts: list[dict[str, str]]) -> None:
    body = json.dumps([{"labels": a} for a in alerts]).encode()
    req = urllib.request.Request(
        url + "/api/v2/alerts", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200


def test_kps_routing_and_info_inhibition(alertmanager: tuple[str, Webhook]) -> None:
    url, webhook = alertmanager
    warning = {"alertname": "ContentionCPUThrottled", "severity": "warning", "namespace": "shop"}
    muted = {"alertname": "ContentionCPUContended", "severity": "info", "namespace": "batch"}
    control = {"alertname": "ContentionCPUContended", "severity": "info", "namespace": "web"}
    _post(
        url,
        [
            {"alertname": "Watchdog", "severity": "none"},
            {"alertname": "InfoInhibitor", "severity": "none", "namespace": "batch"},
            muted,
            control,
            warning,
        ],
    )

    def names() -> set[tuple[str, str]]:
        return {(n.labels["alertname"], n.labels.get("namespace", "")) for n in webhook.snapshot()}

    wait_until(
        "the warning and the un-inhibited info alert at the webhook",
        lambda: {("ContentionCPUThrottled", "shop"), ("ContentionCPUContended", "web")} <= names(),
        15,
        interval=0.2,
    )
    time.sleep(1.5)  # one more group_wait (1 s): anything else would have been sent by now
    assert names() == {("ContentionCPUThrottled", "shop"), ("ContentionCPUContended", "web")}
    status, body = http_get(
        url + "/api/v2/alerts?" + urllib.parse.urlencode({"filter": 'namespace="batch"'})
    )
    by_name = {a["labels"]["alertname"]: a["status"] for a in json.loads(body)}
    assert status == 200
    assert by_name["ContentionCPUContended"]["state"] == "suppressed"
    assert by_name["ContentionCPUContended"]["inhibitedBy"]  # by InfoInhibitor{batch}
    # rule 4: any other firing alert mutes InfoInhibitor itself
    assert by_name["InfoInhibitor"]["inhibitedBy"]
