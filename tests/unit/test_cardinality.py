"""The series budget per container (docs/metrics.md, "Cardinality"), computed from the
metric catalog (``exporter.catalog.budget``), against what a node exports: by default
19 per tracked container without the probe, 43 with it (40 + ``--probe.top-k``).

A small node of ``bench/sampler_bench.py`` (20 containers in pods of two to four,
named by ``bench/cardinality.py``'s metadata file: each pod is a workload) under a
stand-in probe whose every victim waits behind every other cgroup: more than K single
culprits and more than K workloads of two or more containers each, the worst case.
``bench/cardinality.py`` measures the same at 1,000 containers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import Metric

from exporter.agent import Agent, AgentConfig
from exporter.catalog import DEFAULT_COLLECTORS, FAMILIES, OPTIONAL_COLLECTORS
from exporter.catalog.budget import per_container
from exporter.exposition.inputs import Sources
from exporter.exposition.text import render
from exporter.findings import load_thresholds
from exporter.probe import DEFAULT_TOP_K, BlameCell, ProbeConfig
from exporter.probe.burst import HISTOGRAM_BOUNDS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # as the bench does
from cardinality import StandInProbe, series_per_cgroup, write_metadata
from sampler_bench import build_tree

# No bound but against hangs (no server, clock or subprocess bound): scripts/test.sh
# runs these at idle priority (docs/testing.md).
pytestmark = [pytest.mark.untimed, pytest.mark.timeout(900)]

EVERY = frozenset(OPTIONAL_COLLECTORS)


def budget(probe: bool, optional: frozenset[str] = frozenset()) -> int:
    on = DEFAULT_COLLECTORS | optional
    return per_container(FAMILIES, on, probe=probe, buckets=HISTOGRAM_BOUNDS, top_k=DEFAULT_TOP_K)


# What docs/metrics.md's prose and CONTRIBUTING.md promise by default, with the probe:
# a family that raises the computed budget above it must change them too.
PROMISED_WITH_PROBE = 43


class BlameEveryone(StandInProbe):
    """Every tracked cgroup waits in every run-queue bucket, behind unattributed time,
    every other tracked cgroup, and mostly idle (its top culprit: a single one ranks
    among the workloads)."""

    def poll(self) -> Any:
        from exporter.window import CULPRIT_IDLE

        delta = super().poll()
        for vid in self.tracked:
            row = delta.blame[vid]
            row[CULPRIT_IDLE] = BlameCell(0.5, 1)
            for k, cid in enumerate(self.tracked):
                if cid != vid:
                    row[cid] = BlameCell(0.001 * (1 + (k * 7) % 23), 1)
        return delta


def families(
    tmp_path: Path,
    probe: StandInProbe | None,
    optional: frozenset[str] = frozenset(),
    containers: int = 20,
    attach: Callable[[Sources], None] | None = None,
) -> list[Metric]:
    """Three passes of the agent over a bench node whose containers are named; the last
    one's families (``attach``: adds to what the exposition reads beside the passes)."""
    tree = build_tree(tmp_path / "node", containers=containers, cpus=4)
    meta = tmp_path / "metadata.yaml"
    write_metadata(tree, meta)
    cfg = AgentConfig(
        sysfs=str(tree.sysfs),
        procfs=str(tree.procfs),
        sample_interval=5.0,
        metadata_file=str(meta),
        probe=ProbeConfig(enabled=False),
        collectors=optional,
    )
    agent = Agent(cfg, load_thresholds(), probe=probe)
    if attach is not None:
        attach(agent.exposition.sources)
    try:
        now = 1_800_000_000.0
        for _ in range(3):
            now += 5.0
            pub = agent.run_pass(now=now)
        return pub.families()
    finally:
        agent.close()


def exposition(
    tmp_path: Path, probe: StandInProbe | None, optional: frozenset[str] = frozenset()
) -> str:
    return render(families(tmp_path, probe, optional), openmetrics=False).decode()


def test_the_budget_is_what_the_docs_promise() -> None:
    assert budget(probe=True) <= PROMISED_WITH_PROBE
    histograms = sum(n + 3 for n in HISTOGRAM_BOUNDS.values())
    assert budget(probe=True) - budget(probe=False) == histograms + DEFAULT_TOP_K


def test_series_per_container_within_budget_without_probe(tmp_path: Path) -> None:
    per = series_per_cgroup(exposition(tmp_path, None))
    assert len(per) >= 20
    assert max(per.values()) == budget(probe=False), per


def test_series_per_container_within_budget_with_probe(tmp_path: Path) -> None:
    """Blame shares and workload blame shares share one budget of K per victim."""
    text = exposition(tmp_path, BlameEveryone())
    per = series_per_cgroup(text)
    assert len(per) >= 20
    # some victim uses the whole budget, and none more
    assert max(per.values()) == budget(probe=True), per
    assert "\ncontention_blame_ratio{" in text
    assert "\ncontention_workload_blame_ratio{" in text


def test_series_per_container_with_every_collector(tmp_path: Path) -> None:
    """At most the computed budget (no container of the bench's tree has every value
    the optional collectors read)."""
    per = series_per_cgroup(exposition(tmp_path, BlameEveryone(), EVERY))
    assert budget(probe=True) < max(per.values()) <= budget(probe=True, optional=EVERY), per
