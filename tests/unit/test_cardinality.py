"""The series budget per container (docs/metrics.md, "Cardinality"): at most 19 per
tracked container without the probe, 30 with it, by default (27 + ``--probe.top-k``).

A small node of ``bench/sampler_bench.py`` (20 containers in pods of two to four,
named by ``bench/cardinality.py``'s metadata file: each pod is a workload) under a
stand-in probe whose every victim waits behind every other cgroup: more than K single
culprits and more than K workloads of two or more containers each, the worst case.
``bench/cardinality.py`` measures the same at 1,000 containers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from exporter.agent import Agent, AgentConfig
from exporter.exposition.text import render
from exporter.findings import load_thresholds
from exporter.probe import BlameCell, ProbeConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # as the bench does
from cardinality import StandInProbe, series_per_cgroup, write_metadata
from sampler_bench import build_tree

# docs/metrics.md, "Cardinality": the defaults' budget.
MAX_NO_PROBE = 19
MAX_WITH_PROBE = 30


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


def exposition(tmp_path: Path, probe: StandInProbe | None) -> str:
    tree = build_tree(tmp_path / "node", containers=20, cpus=4)
    meta = tmp_path / "metadata.yaml"
    write_metadata(tree, meta)
    cfg = AgentConfig(
        sysfs=str(tree.sysfs),
        procfs=str(tree.procfs),
        sample_interval=5.0,
        metadata_file=str(meta),
        probe=ProbeConfig(enabled=False),
    )
    agent = Agent(cfg, load_thresholds(), probe=probe)
    try:
        now = 1_800_000_000.0
        for _ in range(3):
            now += 5.0
            pub = agent.run_pass(now=now)
        return render(pub.families(), openmetrics=False).decode()
    finally:
        agent.close()


def test_series_per_container_within_budget_without_probe(tmp_path: Path) -> None:
    per = series_per_cgroup(exposition(tmp_path, None))
    assert len(per) >= 20
    assert max(per.values()) <= MAX_NO_PROBE, per


def test_series_per_container_within_budget_with_probe(tmp_path: Path) -> None:
    """Blame shares and workload blame shares share one budget of K per victim."""
    text = exposition(tmp_path, BlameEveryone())
    per = series_per_cgroup(text)
    assert len(per) >= 20
    assert max(per.values()) <= MAX_WITH_PROBE, per
    # not vacuous: both families are exported, and some victim uses the whole budget
    assert "\ncontention_blame_share{" in text
    assert "\ncontention_workload_blame_share{" in text
    assert max(per.values()) == MAX_WITH_PROBE
