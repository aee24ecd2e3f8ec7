"""Golden exposition: a fixture tree → /metrics text, compared to a committed file.

The text is what the exporter serves: one pass of the real agent (probe off, the
process's own metrics left out: they differ between runs), rendered as a scrape gets
it. The renderer must write exactly what prometheus_client's would.

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/unit/test_exposition.py``
and review the diff. ``promtool check metrics`` lints the same text (naming, units,
HELP/TYPE), so a bad name fails here rather than in someone's Prometheus.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.openmetrics.exposition import generate_latest as om_generate_latest
from prometheus_client.process_collector import ProcessCollector

from exporter.agent import Agent, AgentConfig
from exporter.catalog import OPTIONAL_COLLECTORS
from exporter.exposition.text import render as fast_render
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = Path(__file__).parent.parent / "golden"

# Values that differ between runs and machines, normalised before comparing.
_VOLATILE = [
    (re.compile(r'id="\d+"'), 'id="<inode>"'),
    (re.compile(r'python_version="[^"]*"'), 'python_version="<python>"'),
    (re.compile(r'revision="[^"]*"'), 'revision="<revision>"'),
    (re.compile(r'file="' + re.escape(str(FIXTURES)) + "/"), 'file="<fixtures>/'),
    (
        re.compile(r"^(contention_(?:sampler_pass|collector)_duration_seconds\S*) \S+$", re.M),
        r"\1 <duration>",
    ),
]


# Golden variants beyond a fixture tree: (tree, metadata file, optional collectors).
VARIANTS: dict[str, tuple[str, str | None, frozenset[str]]] = {
    # two containers named like the Kubernetes API names them, every --collector.* on
    "v2-systemd-named": (
        "v2-systemd",
        "v2-systemd-metadata.yaml",
        frozenset(OPTIONAL_COLLECTORS),
    ),
}
TREES = ["v2-systemd", "hybrid", "v1-only", "no-psi", "malformed", *VARIANTS]


def agent_at(
    root: Path, metadata: str | None = None, collectors: frozenset[str] = frozenset()
) -> Agent:
    cfg = AgentConfig(
        sysfs=str(root / "sys"),
        procfs=str(root / "proc"),
        probe=ProbeConfig(enabled=False),
        process_metrics=False,
        metadata_file=str(FIXTURES / metadata) if metadata else None,
        collectors=collectors,
    )
    return Agent(cfg, load_thresholds())


def _agent(tree: str) -> Agent:
    base, metadata, collectors = VARIANTS.get(tree, (tree, None, frozenset()))
    return agent_at(FIXTURES / base, metadata, collectors)


def families(tree: str) -> list[Metric]:
    return _agent(tree).run_pass(now=1_700_000_000.0).families()


def render(tree: str) -> str:
    pub = _agent(tree).run_pass(now=1_700_000_000.0)
    return pub.metrics(openmetrics=False, gzipped=False).body.decode()


class _Registry:
    def __init__(self, fams: list[Metric]) -> None:
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


@pytest.mark.parametrize("tree", TREES)
def test_renderer_writes_what_prometheus_client_writes(tree: str) -> None:
    fams = families(tree)
    own = CollectorRegistry()
    ProcessCollector(registry=own)
    GCCollector(registry=own)
    fams += list(own.collect())
    assert fast_render(fams) == generate_latest(_Registry(fams))
    om = om_generate_latest(_Registry(fams))  # type: ignore[no-untyped-call]
    assert fast_render(fams, openmetrics=True) == om


def normalise(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


@pytest.mark.parametrize("tree", TREES)
def test_golden_exposition(tree: str) -> None:
    got = normalise(render(tree))
    golden = GOLDEN / f"{tree}.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1" or not golden.exists():
        if os.environ.get("CI") and not golden.exists():
            pytest.fail(f"golden file {golden} is missing: run with UPDATE_GOLDEN=1 and commit")
        golden.write_text(got)
    assert got == golden.read_text(), f"exposition differs from {golden}; see module docstring"


@pytest.mark.parametrize("tree", ["v2-systemd", "hybrid", "v2-systemd-named"])
def test_promtool_check_metrics(tree: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/setup.sh --test installs it)")
    proc = subprocess.run(
        [promtool, "check", "metrics"],
        input=render(tree),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_v1_only_node_has_no_container_series_and_says_why() -> None:
    text = render("v1-only")
    assert "contention_cpu_usage_seconds_total{" not in text
    assert re.search(r'contention_node_compute_supported\{reason="[^"]+"\} 0\.0', text)


def test_label_values_with_quotes_newlines_and_backslashes(tmp_path: Path) -> None:
    """cgroup names are arbitrary directory names: they must not break the format."""
    from prometheus_client.parser import text_string_to_metric_families

    cg = tmp_path / "sys/fs/cgroup"
    weird = cg / 'odd "name"\nwith\\slash'
    weird.mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpu memory\n")
    (cg / "cpu.pressure").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (weird / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    (tmp_path / "proc/pressure").mkdir(parents=True)
    (tmp_path / "proc/pressure/cpu").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    pub = agent_at(tmp_path).run_pass(now=1.0)
    text = pub.metrics(openmetrics=False, gzipped=False).body.decode()
    assert text.encode() == generate_latest(_Registry(pub.families()))
    usage = [
        s
        for f in text_string_to_metric_families(text)
        if f.name == "contention_cpu_usage_seconds"
        for s in f.samples
    ]
    assert [(s.labels["cgroup"], s.value) for s in usage] == [('/odd "name"\nwith\\slash', 1.5)]
    promtool = shutil.which("promtool")
    if promtool is not None:
        proc = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_series_carry_the_names_or_the_path_never_both_never_empty() -> None:
    """A named container's series carry namespace/pod/container (cAdvisor's and
    kube-state-metrics' labels), an unnamed cgroup's its path; the path, inode, pod UID
    and container ID are on contention_cgroup_info only; no label is sent empty."""
    text = normalise(render("v2-systemd-named"))
    per_cgroup = [x for x in text.splitlines() if re.search(r'[{,](cgroup|pod)="', x)]
    assert per_cgroup and not [x for x in per_cgroup if '=""' in x]
    named = 'container="app",namespace="shop",pod="api-7d9f8c6b5-x2k4q"'
    usage = [x for x in text.splitlines() if x.startswith("contention_cpu_usage_seconds_total{")]
    assert f"contention_cpu_usage_seconds_total{{{named}}}" in " ".join(
        x.split(" ")[0] for x in usage
    )
    assert any(
        x.startswith('contention_cpu_usage_seconds_total{cgroup="/system.slice/') for x in usage
    )
    (info,) = [
        x
        for x in text.splitlines()
        if x.startswith("contention_cgroup_info{") and 'pod="api-7d9f8c6b5-x2k4q"' in x
    ]
    assert 'namespace="shop"' in info and 'container="app"' in info and "cgroup=" not in info
    for label in (
        'cgroup_id="<inode>"',
        'id="/kubepods.slice/',
        'uid="3f9d2a41-',
        'qos="guaranteed"',
        'workload="Deployment/api"',  # what owns it (the metadata file's workload)
    ):
        assert label in info, label
    assert 'container_id="containerd://82d09898' in info
    assert "contention_cpu_limit_cores{" in text  # every collector on in this variant
    assert 'event="oom_kill"' in text
    default = render("v2-systemd")
    for family in (
        "contention_cpu_limit_cores",
        "contention_memory_usage_bytes",
        "contention_pressure_io_",
    ):
        assert family not in default, family
    assert 'event="oom_kill"' not in default and 'event="max"' in default


def test_proc_stat_without_steal_column_exports_no_steal(tmp_path: Path) -> None:
    """Steal is unknown on a kernel without the column: no series, never a 0 (the other
    /proc/stat values are still exported)."""
    root = tmp_path / "node"
    shutil.copytree(FIXTURES / "v2-systemd", root, symlinks=True)
    stat = root / "proc" / "stat"
    lines = stat.read_text().splitlines()
    cut = [" ".join(ln.split()[:8]) if ln.startswith("cpu") else ln for ln in lines]
    stat.write_text("\n".join(cut) + "\n")
    text = agent_at(root).run_pass(now=1_700_000_000.0).metrics(False, False).body.decode()
    assert "contention_node_cpu_steal_seconds_total" not in text
    assert "\ncontention_node_context_switches_total " in text
    assert "\ncontention_node_cpu_steal_seconds_total " in render("v2-systemd")  # with it
