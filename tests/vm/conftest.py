"""Fixtures for tests that run inside the VM lane's guest (see tests/vm/lane.py).

Tests here are marked ``vm``. Outside the guest they are skipped with the reason: they
need a pure cgroup v2 kernel with memory, cpu and io delegated, which the test machines
(hybrid cgroups) do not have. ``scripts/vm-test.sh`` boots that guest and runs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from exporter.catalog import OPTIONAL_COLLECTORS
from exporter.findings.thresholds import Thresholds, load_thresholds
from labs import LabCgroup, LabError, LabLayout, cleanup_stale, detect_layout
from labs.exporter_proc import ExporterProcess
from labs.scenarios import MetadataFile, write_short_window_config

MakeLab = Callable[..., LabCgroup]


def in_guest() -> str | None:
    """Why this is not the VM lane's guest (None when it is)."""
    if os.environ.get("CONTENTION_VM_GUEST") != "1":
        return "runs inside the VM lane's guest (scripts/vm-test.sh)"
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "the guest has no pure cgroup v2 hierarchy at /sys/fs/cgroup"
    if os.geteuid() != 0:
        return "the guest tests run as root"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees every collected item, not only tests/vm's; select by the marker
    # (a keyword match would also take any test under a directory named "vm").
    reason = in_guest()
    for item in items:
        if item.get_closest_marker("vm") is not None and reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
    # The image tests last: the host may still be building the image while the guest
    # boots (tests/vm/lane.py --image-pending). A stable sort keeps every other order.
    items.sort(key=lambda item: item.path.name == "test_v2_image.py")


# --- fixtures (guest only) ---------------------------------------------------------------


@pytest.fixture(scope="session")
def v2_layout() -> Iterator[LabLayout]:
    """The guest's pure v2 layout (cpu and memory delegated by guest_init.sh)."""
    reason = in_guest()
    if reason is not None:
        pytest.skip(reason)
    layout = detect_layout()
    assert layout.mode == "v2" and layout.v2_cpu_controller, layout
    cleanup_stale(layout=layout)
    try:
        yield layout
    finally:
        cleanup_stale(layout=layout)


@pytest.fixture
def make_lab(v2_layout: LabLayout) -> Iterator[MakeLab]:
    """``make_lab("name", cpu_quota_cores=0.2, memory_max=...)`` -> a lab cgroup,
    removed with its workers when the test ends, pass or fail."""
    made: list[LabCgroup] = []

    def make(name: str, **kwargs: Any) -> LabCgroup:
        lab = LabCgroup.create(name, layout=kwargs.pop("layout", v2_layout), **kwargs)
        made.append(lab)
        return lab

    try:
        yield make
    finally:
        errors = []
        for lab in reversed(made):
            try:
                lab.remove()
            except (LabError, OSError) as e:
                errors.append(f"{lab.path}: {e}")
        if errors:
            pytest.fail("lab cleanup failed: " + "; ".join(errors), pytrace=False)


@pytest.fixture(scope="session")
def guest_workdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="contention-vm-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def metadata(guest_workdir: str) -> Iterator[MetadataFile]:
    """The labs-only metadata file the guest's exporter reads."""
    m = MetadataFile(f"{guest_workdir}/metadata.yaml")
    try:
        yield m
    finally:
        m.delete()


@pytest.fixture(scope="session")
def short_window_config(guest_workdir: str) -> str:
    return write_short_window_config(guest_workdir)


@pytest.fixture(scope="session")
def lab_thresholds(short_window_config: str) -> Thresholds:
    """The thresholds the guest's exporter and rules use."""
    return load_thresholds(short_window_config)


# The timing knobs of a TCG guest, whose one emulating thread runs everything in it: a
# sampler pass every 2 s, Prometheus scraping and evaluating every 3 s (the labs' chain,
# test_v2_labs.py). At 1 s, 1 s and 2 s, Prometheus took 34 % and the exporter 20 % of
# the labs guest's CPU, more than its workloads; what the guest's tests check does not
# depend on these (windows and sustains are whole minutes, counters are compared with
# the exporter's own pass timestamps).
GUEST_SAMPLE_INTERVAL = 2.0
GUEST_SCRAPE_INTERVAL = "3s"
GUEST_EVAL_INTERVAL = "3s"


@pytest.fixture(scope="session")
def exporter(
    v2_layout: LabLayout, metadata: MetadataFile, short_window_config: str, guest_workdir: str
) -> Iterator[ExporterProcess]:
    """One real exporter for the whole guest session: sampling every 2 s, the labs'
    short window and metadata file, no probe (the probe has its own tests), and every
    optional collector: the sampler tests check that each file read reaches /metrics."""
    collectors = [f"--collector.{name}" for name in OPTIONAL_COLLECTORS]
    exp = ExporterProcess(
        sample_interval=GUEST_SAMPLE_INTERVAL,
        probe=False,
        extra_args=[
            "--metadata.file",
            metadata.path,
            "--config.file",
            short_window_config,
            *collectors,
        ],
        log_path=f"{guest_workdir}/exporter.log",
    )
    exp.scrape_timeout = 30.0  # a TCG guest runs ~10x slower than the host
    try:
        exp.start(timeout=120.0)  # a TCG guest imports slowly
        yield exp
    finally:
        with contextlib.suppress(Exception):
            exp.close()
