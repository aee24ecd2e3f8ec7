"""The chart's ServiceMonitor and PodMonitor, as the Prometheus Operator turns them into
a scrape job (tests/support/operator_scrape.py), run by a real Prometheus on
127.0.0.1: no series carries the exporter's own pod's namespace, pod or container,
a series that names its container keeps its own, and every series names the node.

The target is a static one carrying the ``__meta_kubernetes_*`` labels service
discovery gives the exporter's pod, serving a fixed exposition: one series of a named
pod, and two of cgroups no pod name is known for (a system unit, a pod not named
yet), the ones the operator's target labels would be stamped on."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from labs.exporter_proc import free_port, terminate
from tests.support.operator_scrape import ExporterPod, scrape_job

from .manifests import Doc, need, one, render

pytestmark = pytest.mark.timeout(120)

EXPOSITION = b"""\
# TYPE contention_cpu_usage_seconds_total counter
contention_cpu_usage_seconds_total{namespace="shop",pod="web-7d9f",container="app"} 12
contention_cpu_usage_seconds_total{cgroup="/system.slice/kubelet.service"} 34
contention_cpu_usage_seconds_total{cgroup="/kubepods.slice/kubepods-burstable.slice/x.scope"} 5
"""
OWN_POD = ExporterPod(
    name="contention-exporter-x7k2p",
    namespace="contention-exporter",
    node="node-a",
    labels={
        "app.kubernetes.io/name": "contention-exporter",
        "app.kubernetes.io/instance": "contention-exporter",
    },
    address="",  # the fixture server's, set per test
    service="contention-exporter",
    service_labels={
        "app.kubernetes.io/name": "contention-exporter",
        "app.kubernetes.io/instance": "contention-exporter",
    },
)


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


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    """Per scrape, the label sets Prometheus stores for the fixture's series: one
    Prometheus runs the operator's job for each, the exporter pod on a node of its own
    (so `instance` says which job a series came from)."""
    prometheus = need("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    monitors = {
        SCRAPES[0]: _monitor("ServiceMonitor"),
        SCRAPES[1]: _monitor("PodMonitor"),
        SCRAPES[2]: _without_labeldrop(_monitor("ServiceMonitor")),
    }
    with exposition() as address:
        jobs = []
        for i, monitor in enumerate(monitors.values()):
            pod = dataclasses.replace(OWN_POD, address=address, node=f"node-{i}")
            job = scrape_job(monitor, [pod])
            job |= {"job_name": f"{job['job_name']}-{i}", "scrape_interval": "1s"}
            jobs.append(job | {"scrape_timeout": "1s"})
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
        name: [s for s in series if s["instance"] == f"node-{i}"] for i, name in enumerate(monitors)
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


def _monitor(kind: str) -> Doc:
    return one(render(("monitoring.kind=" + kind,)), kind)


def _without_labeldrop(monitor: Doc) -> Doc:
    out: Doc = json.loads(json.dumps(monitor))
    key = "endpoints" if out["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    ep = out["spec"][key][0]
    ep["relabelings"] = [r for r in ep["relabelings"] if r.get("action") != "labeldrop"]
    return out


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_no_series_carries_the_exporters_own_pod(
    scraped: dict[str, list[dict[str, str]]], kind: str
) -> None:
    series = scraped[kind]
    assert len(series) == 3
    by_cgroup = {s.get("cgroup", ""): s for s in series}
    named = by_cgroup[""]
    assert (named["namespace"], named["pod"], named["container"]) == ("shop", "web-7d9f", "app")
    for s in series:
        assert s["instance"] == s["node"], s
        assert s["job"] == "contention-exporter", s
        assert s["endpoint"] == "metrics", s
        assert OWN_POD.name not in s.values() and "exporter" not in s.values(), s
        if "cgroup" in s:
            assert not {"namespace", "pod", "container"} & set(s), s
    assert ("service" in named) == (kind == "ServiceMonitor")


def test_without_the_labeldrop_the_operator_stamps_the_exporters_pod(
    scraped: dict[str, list[dict[str, str]]],
) -> None:
    """The control: the same job minus the chart's last relabeling names the exporter's
    pod on every unnamed cgroup's series (what issue 24 saw), so the test above can fail."""
    unnamed = [s for s in scraped[SCRAPES[2]] if "cgroup" in s]
    assert len(unnamed) == 2
    for s in unnamed:
        assert (s["namespace"], s["pod"], s["container"]) == (
            OWN_POD.namespace,
            OWN_POD.name,
            "exporter",
        )
