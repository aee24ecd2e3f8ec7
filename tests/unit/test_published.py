"""Each pass is published whole: a scrape never mixes two passes, and only sends bytes.

The exporter runs for real here (the agent's own loop, the HTTP server on 127.0.0.1)
over a fixture node, with passes back to back while scrapes arrive in every format a
client can ask for.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.agent import Agent, AgentConfig
from exporter.exposition.published import accepts_gzip, wants_openmetrics
from exporter.exposition.registry import PassFamilies
from exporter.exposition.text import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, render
from exporter.findings import load_thresholds
from exporter.findings.model import Finding
from exporter.findings.thresholds import Thresholds
from exporter.probe import ProbeConfig
from exporter.server import App, Server
from exporter.window.model import Window
from tests.support.stand_ins import culprit_ref, findings_per_pass, pass_findings

FIXTURES = Path(__file__).parent.parent / "fixtures"
PASS_TS = "contention_sampler_last_pass_timestamp_seconds"
FINDINGS_TS = "contention_findings_pass_timestamp_seconds"
PASSES = "contention_sampler_passes"
T0 = 1_700_000_000  # pass n is taken at T0 + n s (the numbered fixture's clock)
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def make_agent(root: Path, interval: float, render: str = "pass") -> Agent:
    cfg = AgentConfig(
        sysfs=str(root / "sys"),
        procfs=str(root / "proc"),
        sample_interval=interval,
        probe=ProbeConfig(enabled=False),
        render=render,
    )
    return Agent(cfg, load_thresholds())


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "v2-systemd", root)
    return root


@contextlib.contextmanager
def serving(agent: Agent) -> Iterator[str]:
    """The agent's loop (after a first pass) and the HTTP server on 127.0.0.1."""
    server = Server(App(agent.exposition, agent.facts, 0.002, agent.status), "127.0.0.1:0")
    agent.run_pass()
    agent.start()
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
        agent.close()


@pytest.fixture(params=["pass", "scrape"])
def running(request: pytest.FixtureRequest, node: Path) -> Iterator[tuple[Agent, str]]:
    agent = make_agent(node, interval=0.002, render=request.param)
    with serving(agent) as base:
        yield agent, base


@pytest.fixture(params=["pass", "scrape"])
def numbered(
    request: pytest.FixtureRequest, node: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Agent, str]]:
    """Passes back to back (every 2 ms) whose every part says which pass it is: pass n
    is taken at T0 + n seconds (a stand-in clock), and its findings are the stand-in
    evaluator's for that time: 1 to 3 of them, each naming a culprit after it. The
    evaluation takes a millisecond, as a real one does at scale, so a scrape that could
    land between a pass and its evaluation often does."""

    def evaluate(window: Window, th: Thresholds, now: float, top_k: int) -> list[Finding]:
        time.sleep(0.001)
        return pass_findings(window, th, now, top_k)

    monkeypatch.setattr("exporter.agent.evaluate", evaluate)
    agent = make_agent(node, interval=0.002, render=request.param)
    ticks = itertools.count(T0 + 1)
    agent.sampler.clock = lambda: float(next(ticks))
    with serving(agent) as base:
        yield agent, base


def get(url: str, accept: str = "", encoding: str = "") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": encoding})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, dict(resp.headers), resp.read()


def families(text: str, openmetrics: bool) -> dict[str, list[Sample]]:
    parse = om_parse if openmetrics else text_string_to_metric_families
    return {fam.name: fam.samples for fam in parse(text)}


def one(fams: dict[str, list[Sample]], name: str) -> float:
    """The value of an unlabelled family's one sample."""
    (s,) = fams[name]
    return float(s.value)


def test_every_scrape_shows_one_pass_with_its_own_findings(
    numbered: tuple[Agent, str],
) -> None:
    """Passes run back to back (every 2 ms) while 240 scrapes in four formats and 60
    /findings requests arrive: in every one, each value that says which pass it is
    comes from the same pass, the one contention_sampler_passes_total counts: the
    pass's time, the time the findings were evaluated for, and every
    contention_finding row (which rows, and the culprits they name). (Before each pass
    was published whole, a scrape between the snapshot and the evaluation paired pass
    N+1's series with pass N's findings.)"""
    agent, base = numbered
    variants = [("", ""), ("", "gzip"), (PROMETHEUS_ACCEPT, "gzip"), (PROMETHEUS_ACCEPT, "")]
    seen: set[int] = set()
    for i in range(300):
        if i % 5 == 4:  # /findings: the document of one pass, too
            status, _, body = get(base + "/findings")
            assert status == 200
            doc = json.loads(body)
            at = doc["evaluated_at"]
            refs = {f["culprit"]["ref"] for f in doc["findings"]}
            assert refs == expected_culprits(at), f"/findings request {i} mixes two passes"
            continue
        accept, encoding = variants[i % len(variants)]
        status, headers, body = get(base + "/metrics", accept, encoding)
        assert status == 200
        if encoding:
            assert headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(body)
        om = bool(accept)
        assert headers["Content-Type"] == (OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)
        fams = families(body.decode(), om)
        n = int(one(fams, PASSES))
        at = T0 + n
        rows = {s.labels["culprit"] for s in fams["contention_finding"]}
        got = (one(fams, PASS_TS), one(fams, FINDINGS_TS), rows)
        assert got == (at, at, expected_culprits(at)), f"scrape {i} mixes two passes"
        seen.add(n)
    assert agent.sampler.passes > 20
    assert len(seen) > 10, "the scrapes did not overlap with many passes"


def expected_culprits(at: float) -> set[str]:
    """The culprits the pass taken at ``at`` names (the stand-in evaluator's)."""
    return {culprit_ref(at, i) for i in range(findings_per_pass(at))}


def test_findings_and_health_come_from_the_published_pass(running: tuple[Agent, str]) -> None:
    _, base = running
    status, _, body = get(base + "/findings")
    doc = json.loads(body)
    assert status == 200 and doc["probe_loaded"] is False and doc["containers"] > 0
    assert get(base + "/healthz")[0] == 200
    status, _, page = get(base + "/")
    assert b"tracked cgroups" in page and b"demo --list" in page  # no findings: a hint


def test_a_pass_is_rendered_once_per_format(node: Path) -> None:
    """Scrapes of one pass get the very same bytes; a format is rendered once."""
    agent = make_agent(node, interval=5.0, render="scrape")
    ex = agent.exposition
    first = agent.run_pass(now=1_700_000_000.0)
    assert first.rendered == frozenset()  # nothing until asked
    r = ex.serve("", "", now=100.0)
    assert r is first.metrics(False, False) is ex.serve(None, None, now=101.0)
    gz = ex.serve(PROMETHEUS_ACCEPT, "gzip", now=102.0)
    assert gzip.decompress(gz.body).endswith(b"# EOF\n")
    # The gzip copy keeps no plain OpenMetrics body beside it (memory) ...
    assert first.rendered == {(False, False), (True, True)}
    # ... which is the same bytes when a client asks for it.
    assert first.metrics(True, False).body == gzip.decompress(gz.body)
    assert first.rendered == {(False, False), (True, False), (True, True)}


def test_render_with_the_pass_that_precedes_each_expected_scrape(node: Path) -> None:
    """render="pass": passes every 5 s, a scraper every 15 s. Once its interval is
    known, only the pass before each expected scrape renders (a scrape then sends
    bytes); the passes in between render nothing."""
    agent = make_agent(node, interval=5.0, render="pass")
    ex = agent.exposition
    t, wall = 1_700_000_000.0, 0.0
    rendered: list[bool] = []
    for i in range(12):  # one minute: passes at 0, 5, ..., 55 s
        t += 5.0
        pub = ex.publish(agent.evaluate(agent.sampler.run_once(now=t)), now=wall)
        rendered.append((True, True) in pub.rendered)
        if i % 3 == 2:  # a scrape 2 s after every third pass: 12, 27, 42, 57 s
            r = ex.serve(PROMETHEUS_ACCEPT, "gzip", now=wall + 2.0)
            assert r is pub.metrics(True, True)
        wall += 5.0
    # Scrapes at 12 and 27 s taught the interval (15 s); from then on only the pass
    # just before each scrape (40 and 55 s) renders. Before that nothing was known:
    # the pass after the first scrape rendered just in case.
    assert rendered == [False] * 3 + [True] * 3 + [False, False, True, False, False, True]


def test_an_unexpected_scrape_is_served_anyway(node: Path) -> None:
    agent = make_agent(node, interval=5.0, render="pass")
    pub = agent.run_pass(now=1_700_000_000.0)
    assert pub.rendered == frozenset()  # nobody has ever asked
    body = agent.exposition.serve("", "").body
    assert b"contention_sampler_ready 1.0" in body


def test_a_format_asked_for_later_in_the_pass_rebuilds_the_same_families(node: Path) -> None:
    """After the expected render the pass releases its families; a format nobody
    expected builds those of the pass again (the same bytes as built the first time)
    and keeps the live ones (process, HTTP, status: built once per pass)."""
    agent = make_agent(node, interval=5.0, render="pass")
    ex = agent.exposition
    ex.serve(PROMETHEUS_ACCEPT, "gzip", now=0.0)  # a scraper: expected from now on
    pub = ex.publish(agent.evaluate(agent.sampler.run_once(now=1_700_000_005.0)), now=5.0)
    assert pub.rendered == {(True, True)}
    built = pub._families
    assert isinstance(built, PassFamilies)
    released = {c.name: fams for c, fams in built._built}
    assert released["containers"] is None and released["status"] is not None
    fams = pub.families()  # built again
    status = [m for m in fams if m.name == "contention_collector_success"]
    assert status and status[0] in released["status"]  # the very same, not rebuilt
    for om in (False, True):
        assert pub.metrics(om, False).body == render(fams, om)
    assert gzip.decompress(pub.metrics(True, True).body) == render(fams, True)
    assert {c.name: fams for c, fams in built._built}["containers"] is None


def test_content_negotiation() -> None:
    assert wants_openmetrics(PROMETHEUS_ACCEPT)
    assert wants_openmetrics("application/openmetrics-text")
    assert not wants_openmetrics("application/openmetrics-text; version=2.0.0")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics(None)
    assert accepts_gzip("deflate, gzip;q=0.5")
    assert not accepts_gzip("identity")


def test_concurrent_first_requests_render_once(node: Path) -> None:
    agent = make_agent(node, interval=5.0, render="scrape")
    pub = agent.run_pass(now=1_700_000_000.0)
    got: list[object] = []
    threads = [
        threading.Thread(target=lambda: got.append(pub.metrics(True, True))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in got}) == 1
