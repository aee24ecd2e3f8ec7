"""The renderer keeps each series' line between renders and writes only values that
changed: every render must still be exactly prometheus_client's bytes for the
families it is given, whatever changed since the last one (a label, a value, series
and families coming and going, NaN, infinities, signed zeros, escaping), in both
formats, and its gzip must inflate to them. The node-level test runs the real agent
over a fixture tree whose counters move between passes."""

from __future__ import annotations

import gzip
import math
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.openmetrics.exposition import generate_latest as om_generate_latest
from prometheus_client.samples import Exemplar, Sample

from exporter.catalog import containers as C
from exporter.exposition import deflate
from exporter.exposition.deflate import Gzipper
from exporter.exposition.series import add
from exporter.exposition.text import Renderer

FIXTURES = Path(__file__).parent.parent / "fixtures"
VALUES = (0.0, -0.0, 1.0, 1, 0, 2.5, 1e21, 123456789.0, -3.0, math.inf, -math.inf, math.nan)
LABEL_VALUES = ("a", "b", 'quote"d', "back\\slash", "new\nline", "ü", "")


class _Registry:
    def __init__(self, fams: list[Metric]) -> None:
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def expected(fams: list[Metric], openmetrics: bool) -> bytes:
    if openmetrics:
        return bytes(om_generate_latest(_Registry(fams)))  # type: ignore[no-untyped-call]
    return generate_latest(_Registry(fams))


def check(r: Renderer, g: Gzipper, fams: list[Metric]) -> None:
    for om in (False, True):
        want = expected(fams, om)
        parts = r.parts(fams, om)
        assert b"".join(b"".join(p) for p in parts) == want
        assert gzip.decompress(g.gzip(parts)) == want


def gauge(name: str, series: dict[tuple[str, ...], float], help_: str = "help") -> Metric:
    fam = GaugeMetricFamily(name, help_)
    for labels, v in series.items():
        add(fam, dict(zip(("a", "b", "c"), labels, strict=False)), v)
    return fam


def test_every_change_between_renders_renders_as_prometheus_client() -> None:
    r, g = Renderer(), Gzipper(1)
    steps: list[Callable[[], list[Metric]]] = [
        lambda: [gauge("x", {("a",): 1.0, ("b",): 2.0})],
        lambda: [gauge("x", {("a",): 1.0, ("b",): 2.0})],  # nothing changed
        lambda: [gauge("x", {("a",): 1.5, ("b",): 2.0})],  # a value
        lambda: [gauge("x", {("a2",): 1.5, ("b",): 2.0})],  # a label value
        lambda: [gauge("x", {("b",): 2.0})],  # a series gone
        lambda: [gauge("x", {("b",): 2.0, ("a",): 1.0, ("c",): 3.0})],  # series back, new
        lambda: [gauge("x", {("b",): 0.0})],
        lambda: [gauge("x", {("b",): -0.0})],  # equal to 0.0, not the same text
        lambda: [gauge("x", {("b",): 0})],
        lambda: [gauge("x", {("b",): math.nan})],
        lambda: [gauge("x", {("b",): math.nan})],
        lambda: [gauge("x", {("b",): math.inf}), gauge("y", {(): -math.inf})],
        lambda: [gauge("y", {(): -math.inf})],  # a family gone
        lambda: [gauge("y", {(): 1.0}, "new HELP \\ with\nnewline")],  # HELP changed
        lambda: [gauge("x", {('q"uo\\te\n',): 1.0}), gauge("x", {("a",): 2.0})],  # twice
        lambda: [gauge("x", {('q"uo\\te\n',): 1.0}), gauge("x", {("a",): 3.0})],
    ]
    for step in steps:
        check(r, g, step())


def test_label_order_and_kinds_of_family() -> None:
    r, g = Renderer(), Gzipper(6)
    for v in (1.0, 2.0, 2.0):
        c = CounterMetricFamily("requests", "Requests.", labels=["z", "a"])
        c.add_metric(["1", "2"], v)
        c.samples.append(Sample("requests_total", {"a": "2", "z": "1"}, v))  # other order
        h = HistogramMetricFamily("wait_seconds", "Waits.", labels=["who"])
        h.add_metric(["me"], [("0.1", 1.0), ("+Inf", v)], sum_value=v / 2)
        check(r, g, [c, h])


def test_families_prometheus_client_renders_itself() -> None:
    """A unit, an exemplar or a timestamp: the library's renderer, every time; the
    plain families around them still come from the cache."""
    r, g = Renderer(), Gzipper(1)
    for v in (1.0, 2.0, 2.0):
        with_unit = GaugeMetricFamily("size_bytes", "Size.", unit="bytes")
        with_unit.add_metric([], v)
        ts = GaugeMetricFamily("stamped", "Stamped.")
        ts.add_metric([], v, timestamp=12.5)
        ex = CounterMetricFamily("hits", "Hits.", labels=["k"])
        ex.samples.append(Sample("hits_total", {"k": "v"}, v, None, Exemplar({"t": "1"}, 1.0)))
        check(r, g, [gauge("x", {("a",): v}), with_unit, ts, ex, gauge("y", {(): v})])


def test_random_passes_render_as_prometheus_client() -> None:
    rng = random.Random(28)
    r, g = Renderer(), Gzipper(1)
    series: dict[str, dict[tuple[str, ...], float]] = {}
    for _ in range(60):
        for name in ("alpha", "beta", "gamma"):
            fam = series.setdefault(name, {})
            for _ in range(rng.randrange(4)):
                op = rng.random()
                labels = tuple(rng.choice(LABEL_VALUES) for _ in range(rng.randrange(1, 4)))
                if op < 0.5:
                    fam[labels] = rng.choice(VALUES)
                elif fam:
                    fam.pop(rng.choice(list(fam)))
        present = [n for n in series if rng.random() < 0.85]
        check(r, g, [gauge(n, series[n]) for n in present])


def test_what_is_kept_is_bounded_by_the_last_render() -> None:
    r = Renderer()
    r.render([gauge("x", {(str(i),): float(i) for i in range(500)}), gauge("y", {(): 1.0})])
    assert r.series() == 501
    r.render([gauge("x", {("1",): 1.0})])
    assert r.series() == 1


def test_an_unchanged_family_is_the_same_parts_and_gzip_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compressed: list[bytes] = []
    real = deflate._deflate

    def counting(chunk: bytes, level: int) -> bytes:
        compressed.append(chunk)
        return real(chunk, level)

    monkeypatch.setattr(deflate, "_deflate", counting)
    r, g = Renderer(), Gzipper(1)
    first = r.parts([gauge("x", {("a",): 1.0}), gauge("y", {("b",): 1.0})], True)
    gz_first = g.gzip(first)
    second = r.parts([gauge("x", {("a",): 1.0}), gauge("y", {("b",): 2.0})], True)
    assert second[0] is first[0] and second[1] is not first[1]
    gz_second = g.gzip(second)
    assert gzip.decompress(gz_first) == b"".join(b"".join(p) for p in first)
    assert gzip.decompress(gz_second) == b"".join(b"".join(p) for p in second)
    # x, y and # EOF compressed once each, then only the y that changed
    assert len(compressed) == 4 and b"y{" in compressed[-1]


@pytest.fixture
def node(tmp_path: Path) -> Path:
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "v2-systemd", root)
    return root


def test_passes_whose_counters_move_render_as_prometheus_client(node: Path) -> None:
    """The real agent, one exposition over passes: a container's CPU and PSI counters
    move, then the container goes away; every format of every pass is the library's."""
    from exporter.agent import Agent, AgentConfig
    from exporter.findings import load_thresholds
    from exporter.probe import ProbeConfig

    cfg = AgentConfig(
        sysfs=str(node / "sys"),
        procfs=str(node / "proc"),
        probe=ProbeConfig(enabled=False),
        process_metrics=False,
    )
    agent = Agent(cfg, load_thresholds())
    stats = sorted((node / "sys/fs/cgroup").rglob("*.scope/cpu.stat"))
    assert stats, "the fixture has container cgroups"
    usage = C.CPU_USAGE_SECONDS.name.removesuffix("_total") + "_total{"
    try:
        for n in range(4):
            if n == 3:
                shutil.rmtree(stats[0].parent)
            else:
                text = stats[0].read_text()
                head, _, rest = text.partition("\n")
                stats[0].write_text(f"usage_usec {1_000_000 * (n + 2)}\n{rest}")
                assert head.startswith("usage_usec ")
            pub = agent.run_pass(now=1_700_000_000.0 + 5 * n)
            fams = pub.families()
            for om in (False, True):
                body = pub.metrics(openmetrics=om, gzipped=False).body
                assert body == expected(fams, om)
                assert gzip.decompress(pub.metrics(openmetrics=om, gzipped=True).body) == body
            lines = [x for x in body.decode().splitlines() if x.startswith(usage)]
            if n < 3:  # the moved counter, at its new value
                assert any(x.endswith(f" {float(n + 2)}") for x in lines), lines
    finally:
        agent.close()


def test_kept_gzip_runs_are_slices_of_the_last_body() -> None:
    """One copy of the gzip output: a kept run is read from the body last served."""
    r, g = Renderer(), Gzipper(1)
    fams = [gauge("x", {("a",): 1.0}), gauge("y", {("b",): 1.0})]
    first = g.gzip(r.parts(fams, True))
    again = g.gzip(r.parts([gauge("x", {("a",): 1.0}), gauge("y", {("b",): 2.0})], True))
    assert g._body is again
    assert all(again[a:b] == first[a:b] for _, a, b in list(g._runs.values())[:1])
    want = expected([gauge("x", {("a",): 1.0}), gauge("y", {("b",): 2.0})], True)
    assert gzip.decompress(again) == want
    assert gzip.decompress(g.gzip(r.parts(fams, True))) == expected(fams, True)


def test_a_family_body_is_rewritten_in_place_or_reordered() -> None:
    """Each way a kept family body changes: values moved (runs copied around them),
    the last series gone, series reordered or new, a zero's sign flipped."""
    r, g = Renderer(), Gzipper(1)
    base: dict[tuple[str, ...], float] = {(str(i),): float(i) for i in range(8)}
    check(r, g, [gauge("x", base)])
    check(r, g, [gauge("x", {**base, ("0",): 10.0, ("5",): 55.5, ("7",): 7e21})])
    check(r, g, [gauge("x", {k: v for k, v in base.items() if k != ("7",)})])
    check(r, g, [gauge("x", dict(reversed(base.items())))])
    check(r, g, [gauge("x", {("new",): -0.0, **base})])
    check(r, g, [gauge("x", {("new",): 0.0, **base})])
    check(r, g, [gauge("x", {})])
    check(r, g, [gauge("x", base)])
    assert r.series() == 8
