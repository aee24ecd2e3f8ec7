"""What /healthz, the landing page and the status families say when things go wrong:
a first pass that failed is "failed", not "pending"; a pass that lost cgroups is
"degraded", with the reasons, and still 200 (a restart would not help)."""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.agent import Agent, AgentConfig
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig
from exporter.server import App, Server

FIXTURES = Path(__file__).parent.parent / "fixtures"


def make_agent(root: Path) -> Agent:
    cfg = AgentConfig(
        sysfs=str(root / "sys"),
        procfs=str(root / "proc"),
        sample_interval=60.0,
        probe=ProbeConfig(enabled=False),
    )
    return Agent(cfg, load_thresholds())


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name + "".join(f",{k}={v}" for k, v in sorted(s.labels.items()))
            out[key] = float(s.value)
    return out


@pytest.fixture
def served(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Agent, str]]:
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / request.param, root)
    agent = make_agent(root)
    server = Server(App(agent.exposition, agent.facts, 60.0, agent.status), "127.0.0.1:0")
    agent.exposition.sources.attach_http(server)  # as `run` wires it
    server.start()
    try:
        yield agent, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        agent.close()


@pytest.mark.parametrize("served", ["v2-systemd"], indirect=True)
def test_first_pass_failed_is_not_pending(
    served: tuple[Agent, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, base = served
    assert get(base + "/healthz") == (503, "first pass pending\n")

    def bug(now: float | None) -> None:  # stands in for a bug no part of a pass contains
        raise RuntimeError("boom")

    monkeypatch.setattr(agent.sampler, "_run_once", bug)
    agent.first_pass()  # logged and published as failed; nothing raised
    status, body = get(base + "/healthz")
    assert (status, body) == (503, "first pass failed: RuntimeError: boom\n")
    assert "first pass failed: RuntimeError: boom" in get(base + "/")[1]
    assert "first sampler pass failed" in get(base + "/findings")[1]
    m = samples(get(base + "/metrics")[1])
    assert m["contention_sampler_ready"] == 0
    assert m["contention_sampler_failed_passes_total"] == 1

    monkeypatch.undo()
    agent.first_pass()
    assert get(base + "/healthz") == (200, "ok\n")
    m = samples(get(base + "/metrics")[1])
    assert m["contention_sampler_ready"] == 1
    assert m["contention_sampler_failed_passes_total"] == 1
    assert m["contention_collector_success,collector=cgroups"] == 1


@pytest.mark.parametrize("served", ["malformed"], indirect=True)
def test_lost_cgroups_degrade_and_say_why(served: tuple[Agent, str]) -> None:
    agent, base = served
    agent.first_pass()
    status, body = get(base + "/healthz")
    assert status == 200
    assert body == "ok, degraded: cgroups failed; cgroups not sampled: 2 malformed\n"
    m = samples(get(base + "/metrics")[1])
    assert m["contention_collector_success,collector=cgroups"] == 0
    assert m["contention_sampler_skipped_cgroups_total,reason=malformed"] == 2
    # The same scrape keeps the exporter's own families: its process and its HTTP front.
    assert m["process_resident_memory_bytes"] > 0
    assert "contention_http_open_connections" in m
