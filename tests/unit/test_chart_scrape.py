"""The chart's ServiceMonitor and PodMonitor, as the Prometheus Operator turns them into
a scrape job (``operator_scrape_config`` of tests/e2e/default_install.py, the one the
deploy-path lane runs), run by a real Prometheus on 127.0.0.1: no series carries the
exporter's own pod's namespace, pod or container, a series that names its container
keeps its own, and every series names the node.

The target is a static one carrying the ``__meta_kubernetes_*`` labels service
discovery gives the pod the chart's DaemonSet runs on a node (``exporter_from_daemonset``
of the same module), serving a fixed exposition: one series of a named pod, and two of
cgroups no pod name is known for (a system unit, a pod not named yet), the ones the
operator's target labels would be stamped on."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from labs.exporter_proc import free_port, terminate
from tests.e2e import default_install as di

from .manifests import Doc, need, one, render

pytestmark = pytest.mark.timeout(120)

EXPOSITION = b"""\
# TYPE contention_cpu_usage_seconds_total counter
contention_cpu_usage_seconds_total{namespace="shop",pod="web-7d9f",container="app"} 12
contention_cpu_usage_seconds_total{cgroup="/system.slice/kubelet.service"} 34
contention_cpu_usage_seconds_total{cgroup="/kubepods.slice/kubepods-burstable.slice/x.scope"} 5
"""


@contextmanager
def exposition() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(EXPOSITION)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


# The scrapes compared: the chart's ServiceMonitor and PodMonitor, and the control.
SCRAPES = ("ServiceMonitor", "PodMonitor", "ServiceMonitor without the labeldrop")


@dataclass(frozen=True, slots=True)
class Scraped:
    pod: di.PodMeta  # the exporter's own pod, as service discovery saw it
    series: list[dict[str, str]]  # the label sets Prometheus stored


def _job(
    objects: list[Doc], monitor: Doc, address: str, node: str, work: Path
) -> tuple[Doc, di.PodMeta]:
    """The operator's job for ``monitor`` (scraped every second), its target the pod the
    chart's DaemonSet runs on ``node`` (returned too), serving at ``address``."""
    pod = di.exporter_from_daemonset(
        objects, workdir=work, node_name=node, kubeconfig=str(work / "kubeconfig"), listen=address
    ).pod
    service = one(objects, "Service") if monitor["kind"] == "ServiceMonitor" else None
    job = di.operator_scrape_config(
        monitor, target=address, pod=pod, service=service, scrape_interval="1s"
    )
    return job, pod


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Scraped]:
    """Per scrape, what Prometheus stores for the fixture's series: one Prometheus runs
    the operator's job for each, the exporter pod on a node of its own (so `instance`
    says which job a series came from)."""
    prometheus = need("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    charts = {
        kind: render(("monitoring.kind=" + kind,)) for kind in ("ServiceMonitor", "PodMonitor")
    }
    monitors = {
        SCRAPES[0]: (charts["ServiceMonitor"], one(charts["ServiceMonitor"], "ServiceMonitor")),
        SCRAPES[1]: (charts["PodMonitor"], one(charts["PodMonitor"], "PodMonitor")),
        SCRAPES[2]: (
            charts["ServiceMonitor"],
            _without_labeldrop(one(charts["ServiceMonitor"], "ServiceMonitor")),
        ),
    }
    with exposition() as address:
        jobs, pods = [], []
        for i, (objects, monitor) in enumerate(monitors.values()):
            job, pod = _job(objects, monitor, address, f"node-{i}", tmp / f"pod-{i}")
            pods.append(pod)
            jobs.append(job | {"job_name": f"{job['job_name']}-{i}"})
        (tmp / "prometheus.yml").write_text(yaml.safe_dump({"scrape_configs": jobs}))
        port = free_port()
        log = (tmp / "prometheus.log").open("wb")
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            series = _wait_for_series(f"http://127.0.0.1:{port}", 3 * len(monitors), tmp)
        finally:
            terminate(proc)
            log.close()
    return {
        name: Scraped(pods[i], [s for s in series if s["instance"] == f"node-{i}"])
        for i, name in enumerate(monitors)
    }


def _wait_for_series(base: str, want: int, tmp: Path) -> list[dict[str, str]]:
    query = urllib.parse.urlencode({"query": "contention_cpu_usage_seconds_total"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            result = _get(f"{base}/api/v1/query?{query}")["data"]["result"]
        except OSError:
            result = []
        if len(result) == want:
            return [r["metric"] for r in result]
        time.sleep(0.2)
    pytest.fail(
        f"Prometheus stored no scrape within 60 s:\n{(tmp / 'prometheus.log').read_text()[-3000:]}"
    )


def _without_labeldrop(monitor: Doc) -> Doc:
    out: Doc = json.loads(json.dumps(monitor))
    key = "endpoints" if out["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    ep = out["spec"][key][0]
    ep["relabelings"] = [r for r in ep["relabelings"] if r.get("action") != "labeldrop"]
    return out


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_no_series_carries_the_exporters_own_pod(scraped: dict[str, Scraped], kind: str) -> None:
    series, own = scraped[kind].series, scraped[kind].pod
    assert len(series) == 3
    by_cgroup = {s.get("cgroup", ""): s for s in series}
    named = by_cgroup[""]
    assert (named["namespace"], named["pod"], named["container"]) == ("shop", "web-7d9f", "app")
    for s in series:
        assert s["instance"] == s["node"], s
        assert s["job"] == "contention-exporter", s
        assert s["endpoint"] == "metrics", s
        assert own.name not in s.values() and own.container not in s.values(), s
        if "cgroup" in s:
            assert not {"namespace", "pod", "container"} & set(s), s
    assert ("service" in named) == (kind == "ServiceMonitor")


def test_without_the_labeldrop_the_operator_stamps_the_exporters_pod(
    scraped: dict[str, Scraped],
) -> None:
    """The control: the same job minus the chart's last relabeling names the exporter's
    pod on every unnamed cgroup's series (what issue 24 saw), so the test above can fail."""
    unnamed = [s for s in scraped[SCRAPES[2]].series if "cgroup" in s]
    own = scraped[SCRAPES[2]].pod
    assert len(unnamed) == 2
    assert own.container == "exporter" and own.namespace == "contention-exporter"
    for s in unnamed:
        assert (s["namespace"], s["pod"], s["container"]) == (own.namespace, own.name, "exporter")
