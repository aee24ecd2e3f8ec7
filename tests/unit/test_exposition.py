"""Golden exposition: a fixture tree → /metrics text, compared to a committed file.

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

from exporter.cgroupfs import mode
from exporter.collector import ContentionCollector
from exporter.sampler import Sampler

FIXTURES = Path(__file__).parent.parent / "fixtures"
GOLDEN = Path(__file__).parent.parent / "golden"

# Values that differ between runs and machines, normalised before comparing.
_VOLATILE = [
    (re.compile(r'id="\d+"'), 'id="<inode>"'),
    (re.compile(r'python_version="[^"]*"'), 'python_version="<python>"'),
    (
        re.compile(r"^(contention_(?:sampler_pass|collector)_duration_seconds\S*) \S+$", re.M),
        r"\1 <duration>",
    ),
]


def render(tree: str) -> str:
    root = FIXTURES / tree
    facts = mode.detect(str(root / "sys"), str(root / "proc"))
    sampler = Sampler(facts, procfs=str(root / "proc"))
    sampler.run_once(now=1_700_000_000.0)
    registry = CollectorRegistry()
    registry.register(ContentionCollector(sampler))
    return generate_latest(registry).decode()


def normalise(text: str) -> str:
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


@pytest.mark.parametrize("tree", ["v2-systemd", "hybrid", "v1-only", "no-psi", "malformed"])
def test_golden_exposition(tree: str) -> None:
    got = normalise(render(tree))
    golden = GOLDEN / f"{tree}.prom"
    if os.environ.get("UPDATE_GOLDEN") == "1" or not golden.exists():
        if os.environ.get("CI") and not golden.exists():
            pytest.fail(f"golden file {golden} is missing: run with UPDATE_GOLDEN=1 and commit")
        golden.write_text(got)
    assert got == golden.read_text(), f"exposition differs from {golden}; see module docstring"


@pytest.mark.parametrize("tree", ["v2-systemd", "hybrid"])
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
    facts = mode.detect(str(tmp_path / "sys"), str(tmp_path / "proc"))
    sampler = Sampler(facts, procfs=str(tmp_path / "proc"))
    sampler.run_once(now=1.0)
    registry = CollectorRegistry()
    registry.register(ContentionCollector(sampler))
    text = generate_latest(registry).decode()
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
