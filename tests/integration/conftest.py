"""Fixtures for real-kernel tests: lab cgroups and a running exporter.

Every cgroup and process a test creates is removed in a ``finally``, whatever happens.
Tests marked ``kernel`` are skipped, with the reason, where labs cannot run (not root,
no cgroup2, no PSI). Run them under ``flock /tmp/contention-kernel.lock`` when other
real-kernel suites may run at the same time: they compete for the same 2 CPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from exporter.probe import SchedProbe
from labs import LabCgroup, LabError, LabLayout, cleanup_stale, unavailable_reason
from labs.exporter_proc import ExporterProcess
from tests.support.probe_loaders import LOADERS, probe_loader

MakeLab = Callable[..., LabCgroup]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every collected item comes through here: select by the marker (a keyword match
    # would also take any test under a directory named "kernel").
    kernel_items = [i for i in items if i.get_closest_marker("kernel") is not None]
    if not kernel_items:
        return
    reason = unavailable_reason()
    if reason is not None:
        skip = pytest.mark.skip(reason=f"real-kernel test: {reason}")
        for item in kernel_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lab_layout() -> Iterator[LabLayout]:
    """The node's lab layout; removes lab cgroups left by crashed runs (dead owners
    only) before and after the session."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"real-kernel test: {reason}")
    from labs import detect_layout

    layout = detect_layout()
    cleanup_stale(layout=layout)
    try:
        yield layout
    finally:
        cleanup_stale(layout=layout)


@pytest.fixture
def make_lab(lab_layout: LabLayout, request: pytest.FixtureRequest) -> Iterator[MakeLab]:
    """``make_lab("name", cpu_quota_cores=0.2)`` → a :class:`LabCgroup` removed (with
    its workers) when the test ends, pass or fail."""
    made: list[LabCgroup] = []

    def make(name: str, **kwargs: Any) -> LabCgroup:
        lab = LabCgroup.create(name, layout=lab_layout, **kwargs)
        made.append(lab)
        return lab

    try:
        yield make
    finally:
        errors: list[str] = []
        for lab in reversed(made):
            try:
                lab.remove()
            except (LabError, OSError) as e:
                errors.append(f"{lab.path}: {e}")
        if errors:
            pytest.fail("lab cleanup failed: " + "; ".join(errors), pytrace=False)


@pytest.fixture(params=LOADERS)
def loader(request: pytest.FixtureRequest) -> str:
    """The scheduler probe's loader: probe tests run once per loader (same semantics)."""
    return str(request.param)


@pytest.fixture
def load_probe(loader: str) -> Iterator[Callable[..., SchedProbe]]:
    """``load_probe(**knobs)`` -> a SchedProbe loaded by the test's loader (``loader=``
    in the knobs overrides it), closed after the test; skipped (failed under CI) with
    the reason when this machine cannot load it."""
    yield from probe_loader(loader)


@pytest.fixture(scope="module")
def exporter(lab_layout: LabLayout) -> Iterator[ExporterProcess]:
    """The real exporter on 127.0.0.1:<free port>, sampling every second, no probe."""
    exp = ExporterProcess(sample_interval=1.0, probe=False)
    try:
        exp.start(timeout=30.0)
        yield exp
    finally:
        exp.close()
