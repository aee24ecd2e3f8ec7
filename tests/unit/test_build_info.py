"""The exporter describes itself: ``contention_build_info{version,revision,python_version}``
with the source revision it was built from, and the standard ``process_*`` families of
its own process, wherever ``--path.procfs`` points."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__, revision
from exporter.agent import Agent, AgentConfig
from exporter.findings import load_thresholds
from exporter.probe import ProbeConfig

from .conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[str, tuple[dict[str, str], float]]:
    return {
        s.name: (s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def scrape(procfs: Path, sysfs: Path) -> dict[str, tuple[dict[str, str], float]]:
    cfg = AgentConfig(sysfs=str(sysfs), procfs=str(procfs), probe=ProbeConfig(enabled=False))
    agent = Agent(cfg, load_thresholds())
    try:
        body = agent.run_pass().metrics(openmetrics=False, gzipped=False).body
    finally:
        agent.close()
    return samples(body.decode())


def test_process_metrics_are_the_exporters_own_whatever_procfs_says(tmp_path: Path) -> None:
    """--path.procfs is the node's (a fixture tree here, with no ``self`` at all): the
    process_* families still describe this process, under their standard names."""
    node = FIXTURES / "v2-systemd"
    assert not (node / "proc" / "self").exists()
    got = scrape(node / "proc", node / "sys")
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
    ):
        assert name in got, name
    assert not any(n.startswith("contention_exporter_process") for n in got)
    assert "python_gc_objects_collected_total" in got
    # And they are this process's: its start time and its open files.
    assert abs(got["process_start_time_seconds"][1] - psutil.Process().create_time()) < 1.5
    assert got["process_open_fds"][1] >= 3


def test_build_info_has_version_revision_and_python() -> None:
    node = FIXTURES / "v2-systemd"
    labels, _ = scrape(node / "proc", node / "sys")["contention_build_info"]
    assert labels == {
        "version": __version__,
        "revision": revision.revision(),
        "python_version": platform.python_version(),
    }


def test_a_checkout_reports_its_git_head() -> None:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(
        [git, "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if not head:
        pytest.skip("git cannot read this checkout (e.g. owned by another user)")
    rev = revision.git_revision(ROOT)
    assert rev is not None and rev.split("-")[0] == head
    dirty = subprocess.run(
        [git, "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert rev.endswith("-modified") == bool(dirty)


def test_outside_a_checkout_the_stamp_or_unknown(tmp_path: Path) -> None:
    assert revision.git_revision(tmp_path) is None  # not a repository: git cannot say


_NOT_THE_SOURCE = (
    ".git", ".venv", "build", "*.egg-info", "__pycache__", ".hypothesis",
    ".mypy_cache", ".ruff_cache", ".pytest_cache",
)  # fmt: skip


def test_a_built_wheel_carries_the_revision_and_only_the_product(tmp_path: Path) -> None:
    """setup.py stamps $CONTENTION_REVISION (or the checkout's HEAD) into the wheel;
    the installed package reads it back (exporter/revision.py). The wheel ships the
    product and nothing else (pyproject.toml's package-data; checked here, on the same
    build)."""
    env = {**os.environ, "CONTENTION_REVISION": "0123abcd-test"}
    # Built from a copy: setuptools writes build/ and the egg-info next to setup.py,
    # and a test must not write into the checkout.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*_NOT_THE_SOURCE))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("contention_exporter-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("exporter/data/REVISION").decode().strip() == "0123abcd-test"
        assert_only_the_product(z.namelist(), src)
        z.extractall(tmp_path / "site")
    code = "from exporter.revision import revision; print(revision())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0123abcd-test"


def assert_only_the_product(names: list[str], src: Path) -> None:
    """``names``, a wheel's, are the exporter package and the wheel's metadata: every
    module, the data files, the probe's compiled object and the sources its BCC
    fallback compiles; not labs/, tests/, bench/, the benchmark programs (bpf/bench_*)
    or anything compiled on the build machine."""
    tops = {n.split("/")[0] for n in names}
    dist_info = {t for t in tops if t.startswith("contention_exporter-")}
    assert len(dist_info) == 1 and tops == {"exporter", *dist_info}, sorted(tops)
    assert dist_info.pop().endswith(".dist-info")
    shipped = {n for n in names if n.startswith("exporter/")}
    pkg = src / "exporter"
    modules = {f"exporter/{p.relative_to(pkg)}" for p in pkg.rglob("*.py")}
    data = {f"exporter/data/{p.name}" for p in (pkg / "data").iterdir()}
    bpf = {p.name for p in (pkg / "bpf").iterdir()}
    bench = {b for b in bpf if b.startswith("bench_")}
    assert bench and "sched_probe.bpf.o" in bpf  # the source has both
    probe = {f"exporter/bpf/{b}" for b in bpf - bench}
    want = modules | data | probe | {"exporter/py.typed", "exporter/data/REVISION"}
    assert "exporter/bpf/sched_probe.bpf.o" in want and "exporter/data/thresholds.yaml" in want
    assert shipped == want, (sorted(shipped - want), sorted(want - shipped))
